"""localspec's desktop chat (PySide6): ``localspec gui`` or ``localspec-gui``.

Subpackages by what they show, each importing only those before it:
:mod:`gui.markdown` (Markdown and code as shown), :mod:`gui.settings` (the options),
:mod:`gui.server` (the Serve switch), :mod:`gui.chat` (the conversation: messages, the
store, the chat view, asking and answering), :mod:`gui.models` (the pair: picker,
downloads, loading, the model thread).  Above them, the window: :mod:`gui.side_panel`
and :mod:`gui.shortcuts`, :mod:`gui.window` (the state and the wiring), :mod:`gui.drive`,
:mod:`gui.self_test` and :mod:`gui.screenshot` (driving it from code), and
:mod:`gui.app` (``main()``).  :mod:`gui.qt_check` (can Qt open a window here?) imports
nothing of the app; ``localspec gui`` calls it before anything else.
"""
