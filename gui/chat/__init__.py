"""The conversation: its data (:mod:`~gui.chat.message`), the stored ones
(:mod:`~gui.chat.store`, :mod:`~gui.chat.export`, :mod:`~gui.chat.conversations`, the
list on the left in :mod:`~gui.chat.conversation_list`), the view in the middle
(:mod:`~gui.chat.chat_panel`, :mod:`~gui.chat.chat_view`, :mod:`~gui.chat.answer_writer`,
:mod:`~gui.chat.token_colours`, :mod:`~gui.chat.draft_chart`, a reasoning model's thinking in
:mod:`~gui.chat.thinking_block`, the stats lines in :mod:`~gui.chat.stats_line`), asking and
answering (:mod:`~gui.chat.answers`) and the lines under the input (:mod:`~gui.chat.context_meter`,
:mod:`~gui.chat.session_stats`).  Imports only :mod:`gui.markdown` of the rest of the app."""
