"""Tool calls the way small models write them: a fenced or bare JSON object
``{"name": <a declared tool>, "arguments": {...}}`` parsed as a call beside the template's own
``<tool_call>`` form; under tool_choice "auto" the call grammar wakes at such a call's opening
text (a lazy text trigger) and keeps the rest a valid call; any tool name but empty or with
control characters."""

from __future__ import annotations

import json

import pytest

from localspec.api import SpeculativeModel
from localspec.decoding.grammar import Constraint
from localspec.decoding.params import CallOptions
from localspec.decoding.tool_calls import ToolFormat, check_tools, tool_request
from localspec.decoding.tool_parser import ToolCallParser, split_tool_calls
from localspec.errors import InvalidOptionError
from localspec.llama.grammar_vocab import grammar_tokenizer

NAMES = ("write", "read")
HERMES = ToolFormat("hermes", open_token=0, close_token=3, tools=NAMES)
FENCED = '```json\n{"name": "write", "arguments": {"content": "print(\'hello\')", "filePath": "hello.py"}}\n```'
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
DOTTED = "telemetry.flowrules.interfaceInfo.get"
WRAPPED = (
    '<tools>\n{"type": "function", "function": {"name": "write", "parameters": '
    '{"content": "print(\'hello\')", "filePath": "hello.py"}}}\n</tools>'
)


def _calls(text: str, fmt: ToolFormat = HERMES, names=None) -> tuple[str, list]:
    content, calls = split_tool_calls(text, fmt, names)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


def _held(text: str, names=NAMES) -> str:
    """What a stream of ``text`` holds back: read, not released as content, and no call."""
    parser = ToolCallParser(HERMES, names)
    parser.feed(text)
    return parser.held


def _tools(*names: str, parameters: dict = CITY) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": parameters}} for n in names]


@pytest.mark.parametrize(
    "text",
    [
        FENCED,
        FENCED.replace("```json", "```"),
        FENCED.removeprefix("```json\n").removesuffix("\n```"),  # bare
        FENCED.replace('"arguments"', '"parameters"'),
        '```json\n{\n  "name": "write",\n  "arguments": {\n    "content": "print(\'hello\')",\n'
        '    "filePath": "hello.py"\n  }\n}\n```',  # indented, as the 1.5B writes it
        WRAPPED,  # the template's tool listing copied, arguments as "parameters" (Codex's session)
        WRAPPED.removesuffix("\n</tools>"),  # the grammar ends the answer before the close
        WRAPPED.replace("tools>", "function_call>"),
    ],
)
def test_a_fenced_or_bare_call_to_a_declared_tool_is_a_call(text):
    assert _calls(text) == ("", [("write", {"content": "print('hello')", "filePath": "hello.py"})])


def test_prose_before_and_after_stays_content_and_two_calls_are_two():
    text = f'I will write it.\n\n{FENCED}\n\nThen read it back:\n{{"name": "read", "arguments": {{"path": "a"}}}}\nDone.'
    content, calls = _calls(text)
    assert content == "I will write it.\n\nThen read it back:\n\nDone."
    assert [name for name, _ in calls] == ["write", "read"]
    streamed = ToolCallParser(HERMES)
    pieces = [streamed.feed(text[i : i + 3])[0] for i in range(0, len(text), 3)]
    assert (
        "".join(pieces) + streamed.close()[0]
        == "I will write it.\n\n\n\nThen read it back:\n\nDone."
    )


@pytest.mark.parametrize(
    "text",
    [
        FENCED.replace('"write"', '"delete"'),  # not a declared tool
        FENCED.replace("}}\n", "}\n"),  # not valid JSON
        '{"name": "write", "description": "Write a file", "parameters": {"type": "object"}}',  # a schema's copy
        '{"name": "write", "arguments": "not json"}',
        '<tools>\n{"type": "function", "function": {"name": "write", "description": "Write a file", '
        '"parameters": {"type": "object"}}}\n</tools>',  # the tool listing itself, copied
        "Call write with the content.",
    ],
)
def test_what_is_not_a_call_to_a_declared_tool_stays_text(text):
    assert _calls(text) == (text, [])


def test_without_declared_names_only_the_template_form_is_parsed():
    assert split_tool_calls(FENCED, ToolFormat("hermes", open_token=0, close_token=3)) == (
        FENCED,
        [],
    )
    assert split_tool_calls(FENCED) == (FENCED, [])
    assert _calls(FENCED, ToolFormat("hermes"), names=["write"])[1][0][0] == "write"


def test_the_template_form_comes_first():
    text = 'Sure.\n<tool_call>\n{"name": "read", "arguments": {"path": "a"}}\n</tool_call>'
    assert _calls(text) == ("Sure.", [("read", {"path": "a"})])


def test_an_unfinished_fallback_call_is_not_content():
    cut = 'Writing it now.\n```json\n{"name": "write", "arguments": {"content": "pri'
    assert split_tool_calls(cut, HERMES) == ("Writing it now.", [])
    assert split_tool_calls("Just prose.", HERMES) == ("Just prose.", [])


def test_tool_names_as_clients_send_them_are_accepted_and_control_characters_refused():
    check_tools(_tools(DOTTED, "mcp__fs__read/file", "écrire", "a b"), "auto")
    for bad in ("", "tab\there", "nul\x00"):
        with pytest.raises(InvalidOptionError, match="name"):
            check_tools(_tools(bad), "auto")


def test_tool_request_carries_the_declared_names_and_a_text_trigger():
    request = tool_request(
        CallOptions(tools=_tools(DOTTED, "b"), tool_choice="auto"), lambda: HERMES, "m"
    )
    assert request.format.tools == (DOTTED, "b")
    assert request.trigger.token == 0
    assert request.trigger.pattern.search(b'Ok.\n```json\n{"name": "' + DOTTED.encode() + b'"')
    assert not request.trigger.pattern.search(
        b'x {"name": "' + DOTTED.encode() + b'"'
    )  # not at a line's start
    assert request.trigger.pattern.search(b'{"name"')  # before the name: the grammar then holds it
    required = tool_request(
        CallOptions(tools=_tools("b"), tool_choice="required"), lambda: HERMES, "m"
    )
    assert required.trigger is None


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from localspec.llama.synthetic import write_model

    path = write_model(tmp_path_factory.mktemp("fallback") / "t.gguf", seed=1)
    with SpeculativeModel(path, None, n_ctx=256, strategy="none") as model:
        yield model


def _walk(model, tools: list[dict], text: str) -> dict:
    """Feed ``text``'s tokens one by one through the auto-mode constraint as the loop does
    (``allowed`` on the rest as a draft, ``settle`` with the emitted token)."""
    request = tool_request(CallOptions(tools=tools, tool_choice="auto"), lambda: HERMES, "m")
    tokenizer = grammar_tokenizer(model.target)

    def run():
        constraint = Constraint.compile(
            tokenizer, request.grammar, model.target.n_vocab, request.trigger
        )
        ids = list(tokenizer.tokenize_str(text))
        seen = {"cut_at": None, "woke_at": None, "refused": []}
        for i, token in enumerate(ids):
            if constraint.dormant and constraint.allowed(ids[i:]) == 0 and seen["cut_at"] is None:
                seen["cut_at"] = i
            if not constraint.dormant and not constraint.mask()[token]:
                seen["refused"].append(tokenizer.decode_str([token]))
                return seen
            constraint.settle(None, [token])
            if not constraint.dormant and seen["woke_at"] is None:
                seen["woke_at"], seen["prefix"] = i, tokenizer.decode_str(ids[: i + 1])
                bad = tokenizer.tokenize_str('"Paris"')[0]
                seen["quote_allowed_now"] = bool(constraint.mask()[bad])
        seen["accepting"] = constraint.accepting
        return seen

    return model.target.owner.run(run)


def test_the_grammar_wakes_at_a_fenced_calls_opening_and_a_dotted_name_goes_through(synth):
    text = f'Sure.\n```json\n{{\n  "name": "{DOTTED}",\n  "arguments": {{"city": "Paris"}}\n}}\n```'
    seen = _walk(synth, _tools(DOTTED, "other"), text)
    assert seen["refused"] == []
    assert (
        seen["cut_at"] == seen["woke_at"]
    )  # the draft stops before the token that completes the opening
    assert seen["prefix"].endswith('"name"')
    assert not seen["quote_allowed_now"]  # from there on the mask applies: a colon must come
    assert seen["accepting"]
    assert _calls(text, names=[DOTTED]) == ("Sure.", [(DOTTED, {"city": "Paris"})])


def test_the_grammar_wakes_in_a_wrapped_call_inside_a_tag_and_closes_both_objects(synth):
    text = '<tools>\n{"type": "function", "function": {"name": "write", "parameters": {"city": "Paris"}}}\n</tools>'
    seen = _walk(synth, _tools("write"), text)
    assert seen["refused"] == [] and seen["accepting"]
    assert seen["prefix"].endswith('"name"')
    cut = text.index("}}}") + 2  # the inner object closed, the wrapping not yet
    assert not _walk(synth, _tools("write"), text[:cut])["accepting"]
    assert _calls(text) == ("", [("write", {"city": "Paris"})])


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("Sure.\n<to", "<to"),
        ("Sure.\n<tools>\n", "<tools>\n"),
        (
            'Sure.\n<tools>\n{"type": "function", "function": {"name": "wri',
            '<tools>\n{"type": "function", "function": {"name": "wri',
        ),
        ('Sure.\n```json\n{\n  "na', '```json\n{\n  "na'),
        (
            'Ok.\n```json\n{\n  "name": "create',
            '```json\n{\n  "name": "create',
        ),  # Codex's, before the name is whole
        ("Sure.\n<b>bold</b>", ""),
        ('Sure.\n{"x": 1}', ""),
        ("Sure, <tools> is a tag.", ""),
    ],
)
def test_a_stream_holds_back_what_may_open_a_call(text, held):
    assert _held(text) == held


def test_an_argument_off_the_schema_is_refused_once_awake(synth):
    seen = _walk(synth, _tools("write"), '{"name": "write", "arguments": {"town": "Paris"}}')
    assert seen["woke_at"] is not None and seen["refused"]


def test_prose_does_not_wake_it(synth):
    seen = _walk(synth, _tools("write"), 'Use {"name": "write"} inline, or {"name": "x"} too.')
    assert seen["woke_at"] is None and seen["cut_at"] is None and seen["accepting"]


def test_a_call_opened_at_a_line_s_start_may_name_only_a_declared_tool(synth):
    # the 1.5B under Codex's prompt wrote {"name": "create_hello.py", ...}: awake from the
    # "name" key on, the grammar holds the name to the declared tools
    seen = _walk(
        synth, _tools("write", "read"), 'Ok.\n```json\n{"name": "create_hello.py", "arguments": {}}'
    )
    assert seen["prefix"].endswith('"name"') and seen["refused"]
    assert seen["refused"] == ["c"]  # '"' was allowed (write, read), "c" of "create" is not


@pytest.mark.parametrize("name", ['we"ird}name', "back\\slash", DOTTED, "emoji😀"])
def test_names_the_grammar_must_quote_compile(synth, name):
    text = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": {"city": "x"}}'
    seen = _walk(synth, _tools(name), text)
    assert seen["woke_at"] is not None and not seen["refused"] and seen["accepting"], name


@pytest.mark.real_pair
def test_the_default_pair_s_fenced_auto_answer_comes_back_as_a_call(real_model):
    ask = [
        {"role": "user", "content": "Can you retrieve the details for the user with the ID 7890?"}
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_user_info",
                "description": "Retrieve details for a specific user by their unique identifier.",
                "parameters": {
                    "type": "object",
                    "properties": {"user_id": {"type": "integer"}},
                    "required": ["user_id"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    r = real_model.chat(ask, tools=tools, tool_choice="auto", max_tokens=96)
    assert r.tool_calls, r.text
    assert r.tool_calls[0].name == "get_user_info"
    assert json.loads(r.tool_calls[0].arguments) == {"user_id": 7890}
    assert r.finish_reason == "tool_calls"


def test_a_stream_holds_back_only_what_may_still_be_a_call():
    assert _held("Plain prose.\nMore") == ""
    for tail in ("`", "```js", "```json\n", '```json\n{"na', '{"name": "write", "argu'):
        assert _held("I will write it.\n" + tail) == tail, tail
    done = "Ok.\n" + FENCED + "\nNow"
    assert _held(done) == ""
    assert _held(done + '\n{"name": "read", ') == '{"name": "read", '
