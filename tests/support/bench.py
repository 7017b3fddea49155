"""What the benchmark tests share: a machine record as ``localspec.llama.report.machine_record``
writes one, and ``localspec bench`` arguments parsed as the command line parses them."""

MACHINE_RECORD = {
    "cpu": "AMD EPYC",
    "threads": 2,
    "logical_cpus": 2,
    "memory_bytes": 24 << 30,
    "backend": "CPU",
    "llama_cpp_python": "0.3.36",
    "llama_cpp_commit": "0c1e570",
    "amx": "not in this build",
}


def bench_args(*argv):
    """``localspec bench ARGV...`` as parsed arguments."""
    from localspec.cli import commands

    return commands._parser().parse_args(["bench", *argv])
