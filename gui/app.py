"""``localspec gui`` / ``localspec-gui``: open the desktop chat."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Start the Qt application and the main window; returns the exit status (2, with
    one line on stderr, when Qt cannot open a window here: see :mod:`gui.qt_check`)."""
    from .qt_check import startup_problem

    problem = startup_problem()
    if problem:
        print(f"localspec-gui: error: {problem}", file=sys.stderr)
        return 2
    from PySide6.QtWidgets import QApplication

    from .window import MainWindow

    app = QApplication.instance() or QApplication(list(argv) if argv is not None else sys.argv[:1])
    app.setApplicationName("localspec")
    app.setOrganizationName("localspec")
    window = MainWindow()
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
