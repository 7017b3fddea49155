"""Model files: the catalogue (``catalog``), downloads (``hub``; the caches in ``cache``, the
PyPI mirror in ``mirror``), GGUF headers (``gguf_info``; read from the Hub in ``remote_header``),
draft compatibility (``compat``), what is on disk (``discovery``) and the memory estimate
(``memory``).  Nothing here loads a model."""
