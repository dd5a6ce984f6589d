"""The common chat chunk read in one call (`labkit.wire.readpath.chat_content_events`, issue
47): the C step answers as its Python twin does on any read, and wherever either takes a
read, the parser and the stamps end as the general path (`SSEParser.feed`, then
`OpenAIChatParser.on_event` and `Measurement.event` per event) leaves them; any other read is
left untouched for that path."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from labkit.measurement.recorder import Measurement
from labkit.providers.llamacpp import LlamaCppParser
from labkit.providers.openai import OpenAIChatParser
from labkit.wire import readpath
from labkit.wire.sse import MAX_EVENT_BYTES, SSEParser

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="built on Linux only"),
]

_C, _NOT_BUILT = readpath.compiled_module()
_LIMIT = MAX_EVENT_BYTES + len(b"data: ")
_T = 12_345


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def _parser(fingerprint: str | None = "fp_1", response_id: str | None = "chatcmpl-1") -> Any:
    parser = OpenAIChatParser()
    parser.response_id = response_id
    parser.system_fingerprint = fingerprint
    parser.text_parts.append("before")
    return parser


def _state(parser: Any, m: Measurement) -> dict[str, Any]:
    state = {k: v for k, v in vars(parser).items() if k not in ("usage", "provider_timings")}
    state["usage"] = parser.usage.model_dump()
    state["provider_timings"] = parser.provider_timings.model_dump()
    state["output_ns"] = list(m.output_ns)
    state["first_event_ns"] = m.first_event_ns
    state["first_text_ns"] = m.first_text_ns
    state["done"] = m.done
    return state


def _measurement() -> Measurement:
    return Measurement(0)


def _general(read: bytes, parser: Any) -> dict[str, Any] | None:
    """What the general path leaves after `read` (the chunk payloads joined, then
    `SSEParser.feed`, `on_event` and `Measurement.event` per event); None where it raises."""
    payload = readpath.py_whole_chunks(read)
    assert payload is not None
    m = _measurement()
    framer = SSEParser()
    try:
        for ev in framer.feed(payload, _T):
            m.event(parser.on_event(ev), ev.t_ns)
    except Exception:
        return None
    return _state(parser, m)


def _fused(step: Any, read: bytes, parser: Any) -> tuple[int | None, dict[str, Any]]:
    m = _measurement()
    got = step(read, _LIMIT, _T, parser, m.output_ns)
    if got:
        # what the recorder does with the answer (texts × 2 + [DONE])
        m.first_event_ns = _T
        if got > 1:
            m.first_text_ns = _T
        m.done = bool(got & 1)
    return got, _state(parser, m)


# -- events near the common shape ------------------------------------------------------------

_texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "hi", "a\nb", 'q"q', "back\\slash", "tab\t", "\x00", "é", "😀", "\u2028"]),
)
_plain_scalars = st.sampled_from(["chat.completion.chunk", "m", 1700000000, 0, -5, None, True])
_odd_scalars = st.one_of(
    st.sampled_from([False, 10**19, -(10**17), 1.5, 1e3, "é", "a\\b", [], {}]),
    st.text(max_size=6),
    st.integers(),
)


def _rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in `one_in` draws (hypothesis leans to an integer range's ends)."""
    return draw(st.sampled_from(range(one_in))) == one_in // 2


@st.composite
def _choice(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly the common choice, its keys in any order, some absent; now and then one
    thing that is not common."""
    delta: dict[str, Any] = {"content": draw(_texts)}
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "logprobs": None,
        "finish_reason": None,
    }
    keys = draw(st.permutations(list(choice)))
    choice = {k: choice[k] for k in keys if k == "delta" or not _rarely(draw, 6)}
    if _rarely(draw, 8):
        choice["index"] = draw(st.sampled_from([1, -0.0, "0", None, False, 0.0]))
    if _rarely(draw, 10):
        delta[draw(st.sampled_from(["role", "reasoning_content", "refusal"]))] = "x"
    if _rarely(draw, 12):
        delta["content"] = draw(st.sampled_from([None, 1, ["a"]]))
    if _rarely(draw, 12):
        del choice["delta"]
    if _rarely(draw, 10):
        choice["logprobs"] = {"content": []}
    if _rarely(draw, 8):
        choice["finish_reason"] = draw(st.sampled_from(["stop", "", "length"]))
    if _rarely(draw, 15):
        choice["usage"] = {"completion_tokens": 1}
    return choice


@st.composite
def _chunk_object(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key in draw(st.permutations(["id", "object", "created", "model", "system_fingerprint"])):
        if _rarely(draw, 6):
            continue
        if key == "id":
            obj[key] = draw(st.sampled_from(["chatcmpl-1"] * 6 + ["other", "", "é", 5]))
        elif key == "system_fingerprint":
            obj[key] = draw(st.sampled_from(["fp_1"] * 6 + [None, None, "fp_2", "", 3]))
        else:
            obj[key] = draw(_odd_scalars if _rarely(draw, 8) else _plain_scalars)
    choices: Any = [draw(_choice())]
    if _rarely(draw, 15):
        choices = draw(st.sampled_from([[], [choices[0], choices[0]], "x", [1]]))
    obj["choices"] = choices
    if _rarely(draw, 10):
        extra = draw(st.sampled_from(["usage", "timings", "error", "x_groq", "service_tier"]))
        obj[extra] = draw(st.sampled_from([None, {}, {"message": "m"}, "v"]))
    keys = draw(st.permutations(list(obj)))
    return {k: obj[k] for k in keys}


@st.composite
def _event_data(draw: st.DrawFn) -> bytes:
    """One event's data: `[DONE]`, garbage, or a chunk object written with odd whitespace,
    escapes or not, keys in any order and sometimes twice."""
    kind = draw(st.integers(0, 29))
    if kind == 0:
        return b"[DONE]"
    if kind == 1:
        return draw(st.sampled_from([b"", b"{", b"[DONE] ", b"{}", b"null", b"[1]", b'{"a":1}x']))
    obj = draw(_chunk_object())
    ascii_only = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\t", "  "]))
    separators = (space + "," + space, space + ":" + space)
    text = json.dumps(obj, ensure_ascii=ascii_only, separators=separators)
    if _rarely(draw, 12):  # a key written twice
        text = text[:-1] + ', "choices": ' + json.dumps(obj["choices"]) + "}"
    if _rarely(draw, 12):  # an escaped key, or an escaped plain character
        text = text.replace('"content"', '"\\u0063ontent"').replace("hi", "h\\u0069")
    if _rarely(draw, 10):
        text = space + text + draw(st.sampled_from(["", " ", "x", "]"]))
    data = text.encode("utf-8", "surrogatepass")
    if _rarely(draw, 15):  # a stray byte: raw control, not UTF-8, a lone surrogate
        at = draw(st.integers(0, len(data)))
        stray = draw(st.sampled_from([b"\x01", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\ud800"]))
        data = data[:at] + stray + data[at:]
    return data


@st.composite
def _reads(draw: st.DrawFn) -> bytes:
    """A pushed read: events framed as SSE, then as chunks (one, or several a late read
    gathered), sometimes cut or followed by something else."""
    events = draw(st.lists(_event_data(), min_size=1, max_size=3))
    sep = b"\n\n" if not _rarely(draw, 12) else draw(st.sampled_from([b"\r\n\r\n", b"\n"]))
    payload = b"".join(b"data: " + e + sep for e in events)
    if _rarely(draw, 15):
        payload = b": comment\n\n" + payload
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(payload) - 1)), max_size=2)))
    pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
    read = b"".join(_chunk(p) for p in pieces if p)
    tail = b"" if not _rarely(draw, 10) else draw(st.sampled_from([b"0\r\n\r\n", b"3\r\nab"]))
    return read + tail


_COMMON = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"m","system_fingerprint":"fp_1","choices":[{"index":0,"delta":'
    b'{"content":"%s"},"logprobs":null,"finish_reason":null}]}\n\n'
)


@settings(max_examples=1500, derandomize=True)
@given(_reads())
@example(_chunk(_COMMON % b"hello"))
@example(
    _chunk(_COMMON % b"a" + _COMMON % b"" + _COMMON % b"b\\n\\u00e9\\u4e2d" + b"data: [DONE]\n\n")
)
@example(_chunk(b"data: [DONE]\n\n" + _COMMON % b"after"))
@example(_chunk(_COMMON % b"x")[:-3] + _chunk(b"x\n\n"))
def test_the_common_read_leaves_what_the_general_path_leaves(read: bytes) -> None:
    twin_got, twin = _fused(readpath.py_chat_content_events, read, _parser())
    if _C is not None:
        c_got, c = _fused(_C.chat_content_events, read, _parser())
        assert (c_got, c) == (twin_got, twin)
    untouched = _state(_parser(), _measurement())
    if twin_got is None:
        assert twin == untouched  # nothing consumed: the general path takes the read
        return
    assert readpath.py_whole_chunks(read) is not None
    assert twin == _general(read, _parser())


@st.composite
def _common_reads(draw: st.DrawFn) -> tuple[bytes, list[str], bool]:
    """A read of common events only (any content, key order, whitespace, escaping, the
    ignored keys present or not, `[DONE]` anywhere), with their texts and whether `[DONE]`
    came."""
    texts: list[str] = []
    done = False
    payload = b""
    for _ in range(draw(st.integers(1, 4))):
        if _rarely(draw, 6):
            payload += b"data: [DONE]\n\n"
            done = True
            continue
        text = draw(st.text(max_size=8))
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        obj: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": draw(st.integers(-(10**16), 10**17)),
            "model": draw(st.text(alphabet=st.characters(max_codepoint=127), max_size=5)),
            "system_fingerprint": draw(st.sampled_from(["fp_1", None])),
            "choices": [{k: choice[k] for k in draw(st.permutations(list(choice)))}],
            # OpenAI's own chunks carry these too (tests/providers/streams/openai_chat.sse)
            "service_tier": draw(st.sampled_from(["default", None])),
            "obfuscation": draw(st.text(alphabet="abcXYZ019", max_size=6)),
            "usage": None,
        }
        keys = [
            k for k in draw(st.permutations(list(obj))) if k == "choices" or draw(st.booleans())
        ]
        space = draw(st.sampled_from(["", " ", "\t", " \t "]))
        line = json.dumps(
            {k: obj[k] for k in keys},
            ensure_ascii=draw(st.booleans()),
            separators=(space + "," + space, space + ":" + space),
        )
        payload += b"data: " + line.encode() + b"\n\n"
        if text:
            texts.append(text)
    cuts = sorted(draw(st.sets(st.integers(1, len(payload) - 1), max_size=3)))
    pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
    return b"".join(_chunk(p) for p in pieces), texts, done


@settings(max_examples=500, derandomize=True)
@given(_common_reads())
def test_every_common_read_is_taken_and_read_as_the_general_path_reads_it(
    case: tuple[bytes, list[str], bool],
) -> None:
    read, texts, done = case
    for step in (readpath.py_chat_content_events, readpath.chat_content_events):
        parser = _parser()
        got, state = _fused(step, read, parser)
        assert got == len(texts) * 2 + done
        assert parser.text_parts == ["before", *texts]
        assert state == _general(read, _parser())


def test_openais_and_llama_cpps_own_token_chunks_take_the_common_read() -> None:
    """The recorded streams' token chunks (OpenAI's with service_tier, usage: null and
    obfuscation; llama-server's) are taken; their role, finish and usage chunks are not."""
    for name, taken in (("openai_chat.sse", 7), ("llamacpp_chat.sse", 5)):
        stream = (Path(__file__).parents[1] / "providers" / "streams" / name).read_bytes()
        events = [e + b"\n\n" for e in stream.split(b"\n\n") if e.strip()]
        fingerprint = re.search(rb'"system_fingerprint":"([^"]*)"', events[0])
        assert fingerprint is not None
        got = 0
        for event in events:
            read = _chunk(event)
            answer, state = _fused(
                readpath.chat_content_events, read, _parser(fingerprint.group(1).decode())
            )
            if answer is not None:
                got += 1
                assert state == _general(read, _parser(fingerprint.group(1).decode()))
        assert got == taken, name


def test_the_truth_servers_chat_chunks_take_the_common_read() -> None:
    """The shape the truth server and OpenAI send is the one taken: no test above passes
    by leaving every read to the general path."""
    read = _chunk(_COMMON % b"one") + _chunk(_COMMON % b"t\\u00e9o" + b"data: [DONE]\n\n")
    for step in (readpath.py_chat_content_events, readpath.chat_content_events):
        parser = _parser()
        got, state = _fused(step, read, parser)
        assert got == 2 * 2 + 1
        assert parser.text_parts == ["before", "one", "téo"]
        assert state["output_ns"] == [_T, _T]
        assert state == _general(read, _parser())


@pytest.mark.parametrize(
    ("why", "read", "parser"),
    [
        ("no response id yet", _chunk(_COMMON % b"a"), _parser(response_id=None)),
        ("a fingerprint not yet the parser's", _chunk(_COMMON % b"a"), _parser(fingerprint=None)),
        ("another fingerprint", _chunk(_COMMON % b"a"), _parser(fingerprint="fp_2")),
        (
            "a finish chunk",
            _chunk(_COMMON.replace(b'reason":null', b'reason":"stop"') % b""),
            _parser(),
        ),
        ("a cut chunk", _chunk(_COMMON % b"a")[:-1], _parser()),
        ("the last chunk", _chunk(_COMMON % b"a") + b"0\r\n\r\n", _parser()),
        ("a lone high surrogate", _chunk(_COMMON % b"\\ud83dx"), _parser()),
        ("a lone low surrogate", _chunk(_COMMON % b"\\ude00"), _parser()),
        ("a surrogate pair cut", _chunk(_COMMON % b"\\ud83d\\u00e9"), _parser()),
        ("a raw control character", _chunk(_COMMON % b"a\tb"), _parser()),
        ("not UTF-8", _chunk(_COMMON % b"\xff"), _parser()),
    ],
)
def test_a_read_the_common_path_cannot_prove_is_left_whole(
    why: str, read: bytes, parser: Any
) -> None:
    before = _state(parser, _measurement())
    for step in (readpath.py_chat_content_events, readpath.chat_content_events):
        output: list[int] = []
        assert step(read, _LIMIT, _T, parser, output) is None, why
        assert output == [] and _state(parser, _measurement()) == before


def test_a_line_over_the_limit_is_left_to_the_general_path() -> None:
    read = _chunk(_COMMON % b"abc")
    for step in (readpath.py_chat_content_events, readpath.chat_content_events):
        assert step(read, len(_COMMON) - 2, _T, _parser(), []) is None
        assert step(read, len(_COMMON) + 1, _T, _parser(), []) == 2


def test_which_parsers_offer_the_common_chunk() -> None:
    assert OpenAIChatParser().common_chunk() == readpath.CHAT_CONTENT
    assert LlamaCppParser().common_chunk() == readpath.CHAT_CONTENT  # on_chunk is the same
    asked = OpenAIChatParser()
    asked.want_logprobs(2)
    assert asked.common_chunk() is None
    detailed = OpenAIChatParser()
    detailed.want_event_detail()
    assert detailed.common_chunk() is None

    class Reads(OpenAIChatParser):
        def on_chunk(self, obj: dict[str, Any]) -> int:
            return super().on_chunk(obj)

    assert Reads().common_chunk() is None


def test_a_parser_whose_steps_were_replaced_offers_none(monkeypatch: pytest.MonkeyPatch) -> None:
    real = OpenAIChatParser.on_event
    monkeypatch.setattr(OpenAIChatParser, "on_event", lambda self, event: real(self, event))
    assert OpenAIChatParser().common_chunk() is None
    assert LlamaCppParser().common_chunk() is None
    assert readpath.common_reader(None) is None
    assert readpath.common_reader("no such shape") is None


def test_bad_arguments_are_a_type_error_not_a_crash() -> None:
    assert _C is not None, f"labkit was built without its C read path ({_NOT_BUILT})"
    with pytest.raises(TypeError):
        _C.chat_content_events("not bytes", 10, 1, _parser(), [])
    with pytest.raises(TypeError):
        _C.chat_content_events(b"", 10, 1, _parser(), "not a list")
    with pytest.raises(AttributeError):
        _C.chat_content_events(_chunk(_COMMON % b"a"), _LIMIT, 1, object(), [])
