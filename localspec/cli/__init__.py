"""The command line: ``localspec run``, ``chat``, ``serve``, ``bench``, ``models``, ``pull``,
``doctor``, ``gui``."""

from localspec.cli.commands import main

__all__ = ["main"]
