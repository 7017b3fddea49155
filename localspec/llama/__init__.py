"""The llama.cpp adapter: the only package that imports ``llama_cpp``.

``engine`` (load, tokenize, decode batches with chosen logits rows, trim the KV cache),
``owner`` (the one thread every llama.cpp call of a loaded pair runs on), ``backend``
(build facts: backends, devices, CPU buffer types, the no-AMX placement), ``amx_probe`` /
``amx_child`` (does llama.cpp's AMX path run on this CPU?), ``report`` (``localspec doctor``
and the machine record of benchmarks), ``synthetic`` (tiny random-weight GGUF files).

Importing this package sets ``GOMP_SPINCOUNT=1000`` unless the user chose ``GOMP_SPINCOUNT``
or ``OMP_WAIT_POLICY``; see :func:`spin_briefly_between_ops`.
"""

import os

SPIN_COUNT = "1000"


def spin_briefly_between_ops(environ=os.environ) -> None:
    """Make llama.cpp's idle OpenMP threads sleep after 1000 spins instead of 300000.

    libgomp reads ``GOMP_SPINCOUNT`` once, when llama.cpp's CPU backend loads it (the first
    ``import llama_cpp``), so this runs before that import.  With its default, a thread
    waiting for the next op keeps spinning on its core; two llama.cpp processes on one
    machine (a server and a benchmark, a test run beside an agent) then take turns at the
    cores' expense: two ``localspec run`` at once decoded 13–14 t/s each with 1000 and 2–8 t/s
    with libgomp's default (docs/architecture.md, "OpenMP threads between ops").  A user's own
    ``GOMP_SPINCOUNT`` or
    ``OMP_WAIT_POLICY`` is kept.
    """
    if "GOMP_SPINCOUNT" not in environ and "OMP_WAIT_POLICY" not in environ:
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT


spin_briefly_between_ops()
