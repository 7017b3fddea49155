"""The loaded pair served on localhost: the server (:mod:`~gui.server.serve`) and its switch
(:mod:`~gui.server.serve_switch`).  Imports nothing else of the app."""
