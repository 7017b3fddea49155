"""Model files: the catalogue (``catalog``), downloads (``hub``), GGUF headers
(``gguf_info``), draft compatibility (``compat``), what is on disk (``discovery``) and
the memory estimate (``memory``).  Nothing here loads a model."""
