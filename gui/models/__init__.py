"""The model pair: choosing it (:mod:`~gui.models.model_picker`, :mod:`~gui.models.download`,
:mod:`~gui.models.memory_badge`), or a server to chat with instead
(:mod:`~gui.models.remote_box`, :mod:`~gui.models.remote`), loading it
(:mod:`~gui.models.pair_loading`) and the thread that owns it (:mod:`~gui.models.worker`).
Imports :mod:`gui.chat` (the answer's pieces) and :mod:`gui.server` (the window's server)."""
