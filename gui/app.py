"""``localspec gui`` / ``localspec-gui``: open the desktop chat (``--self-test``: answer
one prompt with the default pair and exit, see :mod:`gui.self_test`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Start the Qt application and the main window; returns the exit status (2, with
    one line on stderr, when Qt cannot open a window here: see :mod:`gui.qt_check`).
    ``argv`` (default ``sys.argv``) starts with the program's name; ``--self-test``
    among its arguments runs :func:`gui.self_test.run` instead of the chat."""
    from .qt_check import startup_problem

    args = list(argv) if argv is not None else sys.argv[:]
    problem = startup_problem()
    if problem:
        print(f"localspec-gui: error: {problem}", file=sys.stderr)
        return 2
    from PySide6.QtWidgets import QApplication

    from .window import MainWindow

    self_test = "--self-test" in args[1:]
    app = QApplication.instance() or QApplication(args[:1] or ["localspec-gui"])
    app.setApplicationName("localspec")
    app.setOrganizationName("localspec")
    if self_test:
        from .self_test import run

        return run()
    window = MainWindow()
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
