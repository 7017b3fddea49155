"""localspec's desktop chat (PySide6): ``localspec gui`` or ``localspec-gui``.

Modules, one job each: :mod:`gui.worker` (the thread that owns both models),
:mod:`gui.chat_view` (the conversation with highlighted tokens), :mod:`gui.model_picker`
(target / draft choice and downloads), :mod:`gui.settings` and :mod:`gui.settings_panel`
(persisted options), :mod:`gui.store` (SQLite conversations), :mod:`gui.window` (the
state and the wiring) with its panels :mod:`gui.conversation_list`, :mod:`gui.chat_panel`
and :mod:`gui.side_panel` (:mod:`gui.memory_badge`, :mod:`gui.serve_switch`) and its
helpers :mod:`gui.answers` (asking, answers coming back), :mod:`gui.context_meter`,
:mod:`gui.conversations`, :mod:`gui.pair_loading`, :mod:`gui.shortcuts` and
:mod:`gui.session_stats`, :mod:`gui.app` (``main()``), :mod:`gui.screenshot` (the
README's picture).
"""
