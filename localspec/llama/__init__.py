"""The llama.cpp adapter: the only package that imports ``llama_cpp``.

``engine`` (load, tokenize, decode batches with chosen logits rows, trim the KV cache),
``owner`` (the one thread every llama.cpp call of a loaded pair runs on), ``backend``
(build facts: backends, devices, CPU buffer types, the no-AMX placement), ``amx_probe`` /
``amx_child`` (does llama.cpp's AMX path run on this CPU?), ``report`` (``localspec doctor``
and the machine record of benchmarks), ``synthetic`` (tiny random-weight GGUF files).
"""
