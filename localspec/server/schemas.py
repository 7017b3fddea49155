"""Request bodies of the OpenAI chat and completions endpoints, validated by pydantic
(strict types, unknown fields kept only where OpenAI has them)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from localspec.decoding.params import STRATEGIES
from localspec.server.request import given


def _refused(*fields: str, why: str):
    """A field validator that refuses any set (truthy) value of ``fields``."""

    def check(cls, value):
        if value:
            raise ValueError(why)
        return value

    return field_validator(*fields)(check)


def _only_one(name: str):
    """A field validator that refuses any value of ``name`` but 1 (or none)."""

    def check(cls, value):
        if value not in (None, 1):
            raise ValueError(f"only {name} = 1 is supported")
        return value

    return field_validator(name)(check)


_STRICT = ConfigDict(strict=True)


class _NamedFunction(BaseModel):
    model_config = _STRICT
    name: str


class _CalledFunction(_NamedFunction):
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json(cls, value: str) -> str:
        try:
            json.loads(value or "{}")
        except ValueError:
            raise ValueError(f"the arguments must be JSON, got {value[:80]!r}") from None
        return value


class _TextPart(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: str
    type: Literal["function"] = "function"
    function: _CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _what_the_role_needs(self):
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id, the id of the call it answers")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(
                f"a {self.role} message needs content"
                + (" or tool_calls" if self.role == "assistant" else "")
            )
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        return (
            self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        )

    def for_model(self) -> dict:
        """The message as :meth:`localspec.api.SpeculativeModel.chat` takes it."""
        message = {
            "role": "system" if self.role == "developer" else self.role,
            "content": self.text(),
        }
        if self.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        thinking = (self.model_extra or {}).get("reasoning_content")
        if self.role == "assistant" and isinstance(thinking, str):
            message["reasoning_content"] = (
                thinking  # an earlier turn's thinking, for the template to keep or drop
            )
        return message


class _FunctionDef(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["function"]
    function: _FunctionDef

    def for_model(self) -> dict:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming the one function the answer must call."""

    model_config = _STRICT
    type: Literal["function"]
    function: _NamedFunction


class Prediction(BaseModel):
    """Predicted Outputs: text the answer is expected to repeat, drafted from."""

    model_config = _STRICT
    type: Literal["content"]
    content: str | list[_TextPart]

    def text(self) -> str:
        return (
            self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        )


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


class SpeculativeOptions(BaseModel):
    """llama.cpp's server names: n_max = draft_max, n_min = draft_min, p_min; plus strategy."""

    model_config = ConfigDict(extra="forbid", strict=True)
    n_max: int | Literal["auto"] | None = None
    n_min: int | None = Field(None, ge=0)
    p_min: float | None = Field(None, ge=0.0, le=1.0)
    strategy: Literal[STRATEGIES] | None = None  # the library's names, listed once

    @field_validator("n_max")
    @classmethod
    def _non_negative(cls, v):
        if isinstance(v, int) and v < 0:
            raise ValueError("must be 'auto' or an integer >= 0")
        return v

    def as_options(self) -> dict:
        """The library's option names: draft_max, draft_min, p_min, strategy (those set)."""
        return given(
            draft_max=self.n_max, draft_min=self.n_min, p_min=self.p_min, strategy=self.strategy
        )


def speculative_options(options: SpeculativeOptions | None) -> dict:
    """A body's ``speculative`` (None: not given) under the library's names."""
    return options.as_options() if options is not None else {}


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: free text, any JSON object, or JSON under a schema."""

    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError(
                "response_format of type json_schema needs json_schema: {name, schema}"
            )
        return self

    def as_option(self) -> dict | None:
        """The form :meth:`localspec.api.SpeculativeModel.chat` takes (None: free text)."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {"name": self.json_schema.name, "schema": self.json_schema.schema_},
        }


class CommonRequest(BaseModel):
    # Unknown fields are ignored (clients send user, metadata, store, ...); types are strict
    # ("0.5" is not a number, true is not 1), as OpenAI's API has them.
    model_config = ConfigDict(extra="ignore", strict=True)
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=-1)
    stop: str | list[str] | None = None
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    speculative: SpeculativeOptions | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict | None = None
    response_format: ResponseFormat | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_speculative_keys(cls, data):
        """llama-server's own request keys (``"speculative.n_max": 4``, ...) are folded
        into ``speculative``, so requests written for it work here unchanged."""
        if not isinstance(data, dict):
            return data
        flat = {
            k: v for k, v in data.items() if isinstance(k, str) and k.startswith("speculative.")
        }
        if not flat:
            return data
        nested = data.get("speculative")
        if nested is not None and not isinstance(nested, dict):
            return data  # the nested value is refused on its own (400, param "speculative")
        rest = {k: v for k, v in data.items() if k not in flat}
        return {
            **rest,
            "speculative": {**(nested or {}), **{k.split(".", 1)[1]: v for k, v in flat.items()}},
        }

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, v):
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return v

    _one_choice = _only_one("n")

    _no_penalties = _refused(
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        why="penalties and logit_bias are not supported (they would change the target's "
        "distribution)",
    )


class ChatRequest(CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    prediction: Prediction | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # reasoning models (docs/reasoning.md), llama-server's names; reasoning_budget is ours
    reasoning_format: Literal["none", "auto", "deepseek"] | None = None
    chat_template_kwargs: dict | None = None
    reasoning_effort: str | None = None
    reasoning_budget: int | None = Field(None, ge=-1)
    reasoning_budget_message: str | None = None  # llama-server's --reasoning-budget-message
    prompt_cache_key: str | None = None  # OpenAI's conversation key: the slot hint


class CompletionRequest(CommonRequest):
    prompt: str | list[str] = Field(min_length=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = 1

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("exactly one prompt is supported")
        return v

    _no_echo = _refused("echo", why="echo is not supported")
    _one_candidate = _only_one("best_of")
