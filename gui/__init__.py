"""localspec's desktop chat (PySide6): ``localspec gui`` or ``localspec-gui``.

Modules, one job each: :mod:`gui.worker` (the thread that owns both models),
:mod:`gui.chat_view` (the conversation with highlighted tokens), :mod:`gui.model_picker`
(target / draft choice and downloads), :mod:`gui.settings` and :mod:`gui.settings_panel`
(persisted options), :mod:`gui.store` (SQLite conversations), :mod:`gui.window` (wiring),
:mod:`gui.app` (``main()``), :mod:`gui.screenshot` (the README's picture).
"""
