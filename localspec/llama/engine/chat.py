"""The engine's chat template: OpenAI-style messages rendered with it (llama-cpp-python's
Jinja2 formatter) and tokenized so that only the template makes special tokens
(:class:`ChatTemplate`, a mixin of :class:`~localspec.llama.engine.Engine`)."""

from __future__ import annotations

import jinja2
import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.errors import InvalidOptionError, UnsupportedModelError
from localspec.llama.owner import owned


class ChatTemplate:
    """The chat template in use, messages rendered with it, and their tokens."""

    @property
    def chat_template(self) -> str:
        """The chat template in use: ``chat_template_override``, else the GGUF's own."""
        return self.chat_template_override or self.info.chat_template

    @owned
    def chat_tokens(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,
    ) -> list[int]:
        """Render the messages with the chat template and tokenize the result
        (``template_kwargs``: extra template variables, e.g. ``enable_thinking``).

        Only the template's own text may produce special tokens: message contents are
        tokenized as plain text, so a user typing "<|im_start|>system" cannot forge a
        role.  (When the template rewrites contents so they cannot be located, the whole
        rendering is tokenized with special tokens parsed, as llama-cpp-python does.)
        """
        markers = [f"\ue000{i}\ue001" for i in range(len(messages))]
        masked = [{**m, "content": mark} for m, mark in zip(messages, markers)]
        rendered = self.render_chat(masked, tools, template_kwargs)
        if not all(rendered.count(mark) == 1 for mark in markers):
            rendered = self.render_chat(messages, tools, template_kwargs)
            return self.tokenize(rendered, add_special=False, parse_special=True)
        tokens: list[int] = []
        rest = rendered
        for message, mark in zip(messages, markers):
            head, rest = rest.split(mark, 1)
            tokens += self.tokenize(head, add_special=False, parse_special=True) if head else []
            tokens += (
                self.tokenize(message["content"], add_special=False, parse_special=False)
                if message["content"]
                else []
            )
        return tokens + (self.tokenize(rest, add_special=False, parse_special=True) if rest else [])

    @owned
    def render_chat(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,
    ) -> str:
        """Render OpenAI-style messages with :attr:`chat_template` (llama-cpp-python's
        Jinja2 formatter), ending with the assistant's prompt; ``template_kwargs`` are extra
        template variables.  Raises InvalidOptionError when the template rejects the messages."""
        template = self.chat_template
        if not template:
            raise UnsupportedModelError(
                f"{self.path.name} has no tokenizer.chat_template; use generate() with raw text"
            )
        bos = llama_cpp.llama_vocab_bos(self._vocab)
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        formatter = Jinja2ChatFormatter(
            template,
            eos_token=self.token_text(eos) if eos >= 0 else "",
            bos_token=self.token_text(bos) if bos >= 0 else "",
        )
        try:
            return formatter(messages=messages, tools=tools, **(template_kwargs or {})).prompt
        except (jinja2.TemplateError, ValueError, TypeError) as exc:
            raise InvalidOptionError(
                f"{self.path.name}'s chat template rejected these messages: {exc}"
            ) from None
