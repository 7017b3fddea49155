"""Asking and answering in the main window: send, regenerate, edit a question, switch
between versions, compare with plain decoding, stop; and the rounds and results the
model thread sends back."""

from __future__ import annotations

from .chat_view import format_stats
from .context_meter import fit_to_context
from .conversations import short_title
from .message import Message, chat_history


class Answers:
    """Starts answers in ``window``'s model thread and shows what comes back.  ``window``:
    the :class:`~gui.window.MainWindow`; its ``request`` is ``(id, kind, answer)`` while an
    answer ("chat", or "baseline" for plain decoding) is being written, else None."""

    def __init__(self, window):
        self.window = window
        self._sent_text = ""  # the question of the answer being written, to put back if it fails
        self._dropped = 0  # messages fit_to_context left out of the history it returned last
        self._request_dropped = 0  # ... of the answer being written

    # --- asking ----------------------------------------------------------------------------

    def send(self) -> None:
        """Send the input box's text; it is cleared only once the request is queued, and
        put back if the request fails."""
        w = self.window
        text = w.input.toPlainText().strip()
        if not text or w.request is not None:
            return
        if not w.model_ready:
            w.show_error(
                "Load a model pair first (Model pair → Load pair)."
                if not w.loading
                else "The pair is still loading; send again when it is ready."
            )
            return
        w.hide_error()
        if w.conversation_id is None:
            w.conversation_id = w.store.create(short_title(text))
            w.conversation_actions.remember_thinking()
            w.conversation_actions.reload()
        user = Message("user", text)
        before = w.messages[: w.messages.index(w.editing)] if w.editing is not None else w.messages
        history, n_prompt = self._fit(chat_history(before + [user], w.settings.system_prompt))
        if history is None:
            return
        if w.editing is not None:  # a new version of that question, beside it
            w.store.add_message(w.conversation_id, user, parent_id=w.editing.parent_id)
            w.editing = None
            w.messages = before
        else:
            w.store.add_message(w.conversation_id, user)
        w.messages.append(user)
        self._sent_text = text
        w.input.clear()
        self._start(
            history, "chat", w.settings.generation_options(), parent_id=user.id, n_prompt=n_prompt
        )

    def _fit(self, history: list[dict]) -> tuple[list[dict] | None, int | None]:
        """(history to send, its prompt tokens) by :func:`fit_to_context` and the Too long
        setting; (None, None) after saying why in the banner.  How many messages were left
        out is noted in the answer's stats."""
        w = self.window
        fitted = fit_to_context(history, w.host.worker.count_tokens, w.panel.overflow.currentData())
        self._dropped = fitted.dropped
        if fitted.problem:
            w.show_error(fitted.problem)
        return fitted.history, fitted.n_prompt

    def regenerate(self, message_id: int | None = None) -> None:
        """Answer the question of answer ``message_id`` (default: the last answer) again,
        as a new version beside it; the old one stays, reachable with ◀ ▶."""
        w = self.window
        if w.request is not None or not w.model_ready:
            return
        answers = [
            m for m in w.messages if m.role == "assistant" and m.kind == "chat" and m.id is not None
        ]
        target = (
            next((m for m in answers if m.id == message_id), None)
            if message_id
            else (answers[-1] if answers else None)
        )
        if target is None:
            return
        w.hide_error()
        history, n_prompt = self._fit(
            chat_history(w.messages[: w.messages.index(target)], w.settings.system_prompt)
        )
        if history is None:
            return
        w.messages = w.messages[: w.messages.index(target)]
        self._sent_text = ""
        self._start(
            history,
            "chat",
            w.settings.generation_options(),
            parent_id=target.parent_id,
            n_prompt=n_prompt,
        )

    def edit(self, message_id: int) -> None:
        """Put question ``message_id`` in the input box; sending it makes a new version of
        the question (and a new answer) beside the old ones.  Esc cancels."""
        w = self.window
        target = next((m for m in w.messages if m.id == message_id and m.role == "user"), None)
        if target is None or w.request is not None:
            return
        w.editing = target
        w.input.setPlainText(target.content)
        w.input.setFocus()
        w.status.setText("Editing a message: Enter sends it as a new version, Esc cancels")

    def switch_version(self, message_id: int, step: int) -> None:
        """Show the previous (``step`` -1) or next (+1) version of a message, and the
        conversation as it went on from that version."""
        w = self.window
        if w.request is not None or w.conversation_id is None:
            return
        siblings = w.store.siblings(message_id)
        if message_id not in siblings:
            return
        i = siblings.index(message_id) + step
        if 0 <= i < len(siblings):
            w.store.switch_to(w.conversation_id, siblings[i])
            w.messages = w.store.messages(w.conversation_id)
            w.view.set_messages(w.messages)
            w.update_buttons()

    def on_view_action(self, name: str, message_id: int) -> None:
        """A link under a message in the view: "previous", "next", "regenerate", "edit"."""
        if name in ("previous", "next"):
            self.switch_version(message_id, -1 if name == "previous" else 1)
        elif name == "regenerate":
            self.regenerate(message_id)
        elif name == "edit":
            self.edit(message_id)

    def stop_or_cancel(self) -> None:
        """Esc: stop the answer being written, else stop editing a question."""
        w = self.window
        if w.request is not None:
            self.stop()
        elif w.editing is not None:
            w.editing = None
            w.input.clear()
            w.status.setText("")

    def compare_with_no_draft(self) -> None:
        """Rerun the prompt of the last answer with plain decoding (no draft, no lookup)."""
        w = self.window
        if w.request is not None or not w.model_ready:
            return
        last = max(
            (i for i, m in enumerate(w.messages) if m.kind == "chat" and m.role == "assistant"),
            default=None,
        )
        if last is None:
            return
        history = chat_history(w.messages[:last], w.settings.system_prompt)
        self._sent_text = ""
        self._start(
            history,
            "baseline",
            {**w.settings.generation_options(), "strategy": "none"},
            parent_id=w.messages[-1].id,
        )

    def _start(
        self,
        history: list[dict],
        kind: str,
        options: dict,
        parent_id: int | None,
        n_prompt: int | None = None,
    ) -> None:
        """Queue the answer to ``history``; ``n_prompt``: its prompt tokens when already
        counted (for the context meter while the answer streams)."""
        w = self.window
        answer = Message("assistant", "", kind=kind, parent_id=parent_id)
        w.messages.append(answer)
        w.view.set_messages(w.messages)
        w.view.begin_answer(answer)
        rid = w.host.generate(history, options)
        w.request = (rid, kind, answer)
        self._request_dropped = self._dropped if kind == "chat" else 0
        if n_prompt is None:
            counted = w.host.worker.count_tokens(history)
            n_prompt = counted[0] if counted else None
        w.context_meter.base = n_prompt
        w.update_context_meter()
        w.status.setText("Generating…" if kind == "chat" else "Measuring plain decoding…")
        w.update_buttons()

    def stop(self) -> None:
        """End the running answer after its current round."""
        w = self.window
        if w.request is not None:
            w.host.stop(w.request[0])
            w.status.setText("Stopping…")

    # --- what the model thread sends back ------------------------------------------------------

    def on_round(self, rid: int, segments: list) -> None:
        """One round's new pieces of answer ``rid`` (:class:`~gui.chat.message.Segment`)."""
        w = self.window
        if w.request is not None and rid == w.request[0]:
            w.view.append_segments(segments)
            w.update_context_meter()

    def _take_request(self, rid: int):
        """(kind, answer message) of the running request if ``rid`` is it, and forget it;
        None for a stale signal."""
        w = self.window
        if w.request is None or rid != w.request[0]:
            return None
        _, kind, answer = w.request
        w.request = None
        return kind, answer

    def on_finished(self, rid: int, result: dict) -> None:
        """Answer ``rid`` is done: ``result`` has its "text", "stats" and "finish_reason"
        (and "reasoning", a reasoning model's thinking); it is stored, shown with its stats,
        and counted in the session line."""
        taken = self._take_request(rid)
        if taken is None:
            return
        kind, answer = taken
        w = self.window
        answer.content = result["text"]
        answer.reasoning = result.get("reasoning") or "".join(
            s.text for s in answer.reasoning_segments
        )
        answer.stats = result["stats"]
        if self._request_dropped:
            answer.stats["context_dropped_messages"] = self._request_dropped
        w.context_meter.base = None
        answer.finish_reason = result["finish_reason"]
        if w.conversation_id is not None:
            w.store.add_message(w.conversation_id, answer, parent_id=answer.parent_id)
            w.messages = w.store.messages(w.conversation_id)  # with the versions counted
            w.conversation_actions.reload()
        self._count_in_session(kind, answer)
        w.view.end_answer()
        w.view.set_messages(w.messages)
        w.session_label.setText(w.session.text())
        line = format_stats(
            answer.stats, answer.finish_reason, w.session.baseline_tps if kind == "chat" else None
        )
        w.status.setText(("Plain decoding: " if kind == "baseline" else "") + line)
        if answer.finish_reason == "context":
            w.show_error(
                f"The context is full ({w.settings.n_ctx} tokens): start a New chat, "
                "or raise Context and Load the pair again."
            )
        w.update_buttons()
        w.update_context_meter()
        shown = next(
            (m for m in w.messages if m.id == answer.id), answer
        )  # with its versions counted
        w.answerDone.emit(shown)

    def _count_in_session(self, kind: str, answer: Message) -> None:
        session, view = self.window.session, self.window.view
        if kind == "baseline":
            session.baseline_tps = answer.stats.get("tokens_per_s") or None
            view.baseline_tps = session.baseline_tps
        else:
            session.add(answer.stats)

    def on_failed(self, rid: int, message: str) -> None:
        """Answer ``rid`` failed with ``message``: it is removed, its question too (the text
        goes back into the input box), and the banner says why."""
        taken = self._take_request(rid)
        if taken is None:
            return
        kind, answer = taken
        w = self.window
        w.context_meter.base = None
        w.messages.remove(answer)
        if kind == "chat" and self._sent_text and w.messages and w.messages[-1].role == "user":
            self._put_the_question_back()
        if w.conversation_id is not None:  # back to the path the store has
            w.store.set_leaf(w.conversation_id, w.messages[-1].id if w.messages else None)
            w.messages = w.store.messages(w.conversation_id)
        w.view.end_answer()
        w.view.set_messages(w.messages)
        w.status.setText("")
        w.show_error(f"The answer failed: {message}")
        w.update_buttons()
        w.answerFailed.emit(message)

    def _put_the_question_back(self) -> None:
        w = self.window
        user = w.messages.pop()
        if user.id is not None:
            w.store.delete_message(user.id)
        current = w.input.toPlainText()
        w.input.setPlainText(self._sent_text + ("\n" + current if current.strip() else ""))
