"""Markdown as shown in the chat, each shown character mapped to the source character it came
from: blocks (:mod:`~gui.markdown.markdown_render`), inline styles
(:mod:`~gui.markdown.markdown_inline`) and code colours (:mod:`~gui.markdown.code_colours`).
Imports nothing else of the app."""
