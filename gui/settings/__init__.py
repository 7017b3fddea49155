"""The user's options: kept between runs (:mod:`~gui.settings.settings`) and their widgets
(:mod:`~gui.settings.settings_panel`).  Imports nothing else of the app."""
