"""What the fake server answers a request with, before any byte is framed.

`read_request` takes what a request body asks for (API, streaming, ``max_tokens``, the prompt
as text, tools, sampling, ...); `Responder.reply` turns it and a `TruthSchedule` into a
`Reply`: the timing `Plan`, the text or tool-call piece of every output event, each token's
known distribution (`Step`, with sampling or logprobs), the token counts and the stop
reason. The truth server and the in-process fake provider both answer through it, so
they send the same replies. The server's own tokenizer (`pieces`) cuts a prompt into
whitespace pieces: a run of printable ASCII with the white space before it, any other
character on its own; ``/tokenize`` answers with the same cut.
"""

from __future__ import annotations

import json
import math
import random
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

from labkit.truth.batch import batch_flips
from labkit.truth.cache import PrefixCache
from labkit.truth.model_variant import model_distribution, prompt_count
from labkit.truth.routing import CacheRouter
from labkit.truth.schedule import MAX_REPLY_TOKENS, Plan, TruthSchedule, plan

__all__ = [
    "VOCABULARY",
    "WORDS",
    "Reply",
    "Request",
    "Responder",
    "Step",
    "ToolCall",
    "count_pieces",
    "distribution",
    "pieces",
    "read_request",
    "token_id",
]

#: The scripted reply's words, one token each, cycled.
WORDS = (
    " tokens",
    " are",
    " the",
    " pieces",
    " a",
    " model",
    " reads",
    " and",
    " writes",
    " one",
    " at",
    " a",
    " time",
)
#: The tokens sampling draws from (each one token of the server's tokenizer).
VOCABULARY = (
    " a",
    " and",
    " answer",
    " are",
    " at",
    " be",
    " clock",
    " each",
    " first",
    " is",
    " it",
    " last",
    " model",
    " next",
    " of",
    " one",
    " pieces",
    " reads",
    " runs",
    " server",
    " step",
    " the",
    " time",
    " token",
    " tokens",
    " while",
    " word",
    " writes",
)
#: The chat template's special tokens and their ids.
SPECIAL_IDS = {"<|im_start|>": 1, "<|im_end|>": 2}
_SPECIAL = re.compile(r"(<\|im_start\|>|<\|im_end\|>)")
_PIECE = re.compile(r"\s*[!-~]+|\s*[^\x00-\x7f]|\s*\S|\s+")
_FIRST_ID = 1000
_ID_SPAN = 1 << 20


def pieces(text: str) -> list[str]:
    """`text` cut into the server's tokens: a special token whole, a run of printable ASCII
    with the white space before it, any other character (with its white space) alone, and
    trailing white space."""
    out: list[str] = []
    for part in _SPECIAL.split(text):
        if part in SPECIAL_IDS:
            out.append(part)
        elif part:
            out.extend(_PIECE.findall(part))
    return out


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f]")


def count_pieces(text: str) -> int:
    """``len(pieces(text))``, in one C-level pass for printable ASCII (where a piece is a run
    of non-space with its white space before it, plus trailing white space)."""
    if not text.isascii() or _CONTROL.search(text) or "<|im_" in text:
        return len(pieces(text))
    return len(text.split()) + (1 if text[-1:].isspace() else 0)


def token_id(piece: str) -> int:
    """A piece's id: fixed for the special tokens, else from a CRC of its bytes."""
    special = SPECIAL_IDS.get(piece)
    if special is not None:
        return special
    return _FIRST_ID + zlib.crc32(piece.encode("utf-8")) % _ID_SPAN


@dataclass(frozen=True)
class Request:
    """What one request body asks of the server."""

    api: str
    stream: bool = False
    model: str | None = None
    max_tokens: int | None = None
    #: The prompt's messages as (role, text); one message of role "" for a raw prompt.
    messages: tuple[tuple[str, str], ...] = ()
    #: Offered tools: (name, JSON schema of the arguments).
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()
    tool_choice: Any = None
    #: Tool results in the history (a tool step done).
    tool_results: int = 0
    #: llama.cpp's ``cache_prompt`` (false: the prefix cache is not read).
    cache_prompt: bool = True
    #: OpenAI's ``prompt_cache_key``: which replica's cache it meets (`labkit.truth.routing`).
    cache_key: str | None = None
    #: llama.cpp's and vLLM's ``ignore_eos``: the reply never stops on its own.
    ignore_eos: bool = False
    #: Sampling: the temperature (None: the API's default, 1) and the seed (None: none).
    temperature: float | None = None
    seed: int | None = None
    #: Alternatives per token asked for (`top_logprobs`, llama.cpp's `n_probs`; 0 with
    #: `logprobs: true` alone); None: no logprobs asked.
    top_logprobs: int | None = None
    #: The tool a llama.cpp `grammar` forces the reply to call as JSON text (labkit's
    #: forced-call grammar, `FORCED_CALL_MARK`): its first `name` alternative; None: none.
    grammar_call: str | None = None
    #: llama.cpp's ``timings_per_token``: its cumulative `timings` on every token chunk.
    timings_per_token: bool = False
    #: Whether the request asks the model to reason (Chat `reasoning_effort`, Responses
    #: `reasoning.effort`, other than "none"): the schedule's hidden reasoning applies.
    reasoning: bool = False

    @property
    def prompt_text(self) -> str:
        """The prompt without a template: the messages' texts, one per line."""
        return "\n".join(text for _, text in self.messages)

    def prompt(self, template: bool) -> str:
        """The prompt the server counts: with `template`, a chat's messages framed as
        ChatML (a raw Completions prompt never is)."""
        if not template or self.api == "completions":
            return self.prompt_text
        turns = [f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in self.messages]
        return "".join(turns) + "<|im_start|>assistant\n"


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                for key in ("text", "output", "content", "arguments"):
                    value = part.get(key)
                    if isinstance(value, str):
                        out.append(value)
                        break
                    if isinstance(value, list):
                        out.append(_text(value))
                        break
            elif isinstance(part, str):
                out.append(part)
        return "".join(out)
    return ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tools(body: dict[str, Any]) -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        inner = tool.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else tool
        name = function.get("name")
        schema = function.get("parameters") or function.get("input_schema") or {}
        if isinstance(name, str) and name:
            out.append((name, schema if isinstance(schema, dict) else {}))
    return tuple(out)


def read_request(api: str, body: bytes) -> Request:
    """The request a body of `api` (chat, completions, responses, messages) makes; ValueError,
    its message for the client, when the body cannot be served."""
    try:
        obj = json.loads(body or b"{}")
    except ValueError:
        raise ValueError("the body is not JSON") from None
    except RecursionError:
        raise ValueError("the body's JSON is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError("the body is not a JSON object")
    listed = obj.get("messages", [])
    if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
        raise ValueError("messages must be a list of objects")
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = obj.get(key)
        if value is not None and (_int(value) is None or value < 0):
            raise ValueError(f"{key} must be a non-negative integer")
    messages: list[tuple[str, str]] = []
    results = 0
    if api == "completions":
        prompt = obj.get("prompt")
        text = prompt if isinstance(prompt, str) else _text(prompt)
        messages.append(("", text))
    elif api == "responses":
        if isinstance(obj.get("instructions"), str):
            messages.append(("system", obj["instructions"]))
        items = obj.get("input")
        if isinstance(items, str):
            messages.append(("user", items))
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call_output":
                results += 1
                messages.append(("tool", _text([item])))
            elif item.get("type") == "function_call":
                messages.append(("assistant", str(item.get("arguments") or "")))
            else:
                messages.append((str(item.get("role") or "user"), _text(item.get("content"))))
    else:
        system = obj.get("system")
        if system is not None:
            messages.append(("system", _text(system) if not isinstance(system, str) else system))
        for m in obj.get("messages") or ():
            if not isinstance(m, dict):
                continue
            role = str(m.get("role") or "user")
            content = m.get("content")
            if role == "tool":
                results += 1
            elif isinstance(content, list):
                results += sum(
                    1 for p in content if isinstance(p, dict) and p.get("type") == "tool_result"
                )
            messages.append((role, _text(content)))
    cap = None
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        cap = _int(obj.get(key))
        if cap is not None:
            break
    if obj.get("ignore_eos") is True and cap is not None and cap > MAX_REPLY_TOKENS:
        raise ValueError(
            f"max_tokens {cap} with ignore_eos is over the truth server's limit of "
            f"{MAX_REPLY_TOKENS} tokens"
        )
    model = obj.get("model")
    return Request(
        api=api,
        stream=obj.get("stream") is True,
        model=model if isinstance(model, str) and model else None,
        max_tokens=cap,
        messages=tuple(messages),
        tools=_tools(obj),
        tool_choice=obj.get("tool_choice"),
        tool_results=results,
        cache_prompt=obj.get("cache_prompt") is not False,
        cache_key=_cache_key(obj.get("prompt_cache_key")),
        ignore_eos=obj.get("ignore_eos") is True,
        temperature=_number(obj.get("temperature")),
        seed=_int(obj.get("seed")),
        top_logprobs=_top_logprobs(api, obj),
        grammar_call=_grammar_call(obj.get("grammar")),
        timings_per_token=obj.get("timings_per_token") is True,
        reasoning=_asks_reasoning(api, obj),
    )


def _cache_key(value: Any) -> str | None:
    """A `prompt_cache_key` as the routing reads it (a non-empty string, at most 1,024
    characters kept; anything else: none)."""
    return value[:1024] if isinstance(value, str) and value else None


def _asks_reasoning(api: str, obj: dict[str, Any]) -> bool:
    """Whether a body asks for reasoning: Chat's `reasoning_effort` or Responses'
    `reasoning: {effort}` (OpenAI's API reference), set and not "none"."""
    if api == "chat":
        effort = obj.get("reasoning_effort")
    elif api == "responses":
        reasoning = obj.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    else:
        return False
    return isinstance(effort, str) and effort not in ("", "none")


#: The first line of the GBNF grammar labkit forces a tool call with on a llama.cpp model
#: whose template knows no tools (`labkit.providers.tools.GrammarTools`).
FORCED_CALL_MARK = "# labkit: a forced tool call"
_GRAMMAR_NAME = re.compile(r'^name ::= "\\"([A-Za-z0-9_.-]+)\\""', re.MULTILINE)


def _grammar_call(grammar: Any) -> str | None:
    """The tool a forced-call grammar makes the reply call (its first name), else None: the
    server cannot run a grammar, but it can answer the one labkit sends as llama.cpp would."""
    if not isinstance(grammar, str) or not grammar.startswith(FORCED_CALL_MARK):
        return None
    match = _GRAMMAR_NAME.search(grammar)
    return match.group(1) if match else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _top_logprobs(api: str, obj: dict[str, Any]) -> int | None:
    """The alternatives per token a body asks for; None when it asks for no logprobs."""
    top = _int(obj.get("top_logprobs"))
    if top is None:
        top = _int(obj.get("n_probs"))
    if api == "responses":
        include = obj.get("include") or ()
        asked = "message.output_text.logprobs" in include if isinstance(include, list) else False
        return (top or 0) if asked or top is not None else None
    if obj.get("logprobs") is True or top is not None:
        return max(top or 0, 0)
    return None


@dataclass(frozen=True)
class Step:
    """One output token and the distribution it was drawn from: the candidates (the token
    among them) with the probabilities the server reports, likeliest first."""

    token: str
    candidates: tuple[tuple[str, float], ...]

    @property
    def probability(self) -> float:
        """The chosen token's probability."""
        return dict(self.candidates)[self.token]


def distribution(prompt_key: int, step: int, k: int) -> list[tuple[str, float]]:
    """The known next-token distribution at `step` of a prompt (`prompt_key`, its CRC): `k`
    candidates of `VOCABULARY` and their logits, likeliest first; the same every time."""
    draw = random.Random(prompt_key * 1_000_003 + step)
    words = draw.sample(VOCABULARY, min(k, len(VOCABULARY)))
    logits = [draw.gauss(0.0, 2.0) for _ in words]
    return sorted(zip(words, logits, strict=True), key=lambda wl: -wl[1])


def _softmax(logits: list[float], temperature: float) -> list[float]:
    scaled = [x / temperature for x in logits]
    top = max(scaled)
    weights = [math.exp(x - top) for x in scaled]
    total = sum(weights)
    return [w / total for w in weights]


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a reply: its id, name and whole arguments (JSON text)."""

    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """One answer: its timing, what each output event carries, the counts and the end."""

    rid: str
    request: Request
    schedule: TruthSchedule
    model: str
    plan: Plan
    prompt_tokens: int
    #: Prompt tokens read from the prefix cache (0 without one).
    cached_tokens: int
    #: The text each output event carries (its tokens' pieces; tool calls: argument pieces).
    texts: list[str]
    #: The tool calls (empty: a text reply); event i carries a piece of call `call_of[i]`.
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_of: list[int] = field(default_factory=list)
    #: The Chat finish_reason: stop (or the schedule's), length, tool_calls.
    finish_reason: str = "stop"
    #: A call made as text, as a grammar forced it (logged as the reply's tool calls; the
    #: reply itself is content, as llama.cpp sends it).
    text_calls: list[ToolCall] = field(default_factory=list)
    #: Each output token's step (with sampling, or logprobs asked; else empty).
    steps: list[Step] = field(default_factory=list)
    #: The batch the request decoded in (`labkit.truth.batch.batch_seen`; None: not
    #: counted, the schedule flips nothing) and the steps that batch flipped (0-based).
    batch: int | None = None
    flipped_steps: list[int] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        """Tokens streamed (or in the body)."""
        return self.plan.output_tokens

    @property
    def usage_output_tokens(self) -> int:
        """Output tokens the usage reports: the end token too."""
        return self.plan.output_tokens + self.plan.end_token

    @property
    def generated_tokens(self) -> int:
        """Tokens the server decoded, as its own timings count them: hidden reasoning too."""
        return self.usage_output_tokens + self.plan.reasoning_tokens

    @property
    def reasoning_tokens(self) -> int:
        """Hidden reasoning tokens thought before the first output event (never streamed)."""
        return self.plan.reasoning_tokens

    @property
    def capped(self) -> bool:
        """Ended by the request's max_tokens."""
        return self.plan.capped

    @property
    def text(self) -> str:
        """The whole visible text (empty for a tool-call reply)."""
        return "" if self.tool_calls else "".join(self.texts)

    def first_of_call(self, i: int) -> bool:
        """Whether output event `i` opens its tool call."""
        return i == 0 or self.call_of[i] != self.call_of[i - 1]


def _argument_frame(schema: dict[str, Any]) -> tuple[str, str, bool]:
    """The JSON text before and after a call's streamed words, and whether the words go in:
    the schema's first string property gets them, every other required property a fixed
    value of its type."""
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    fixed: dict[str, Any] = {}
    words_in: str | None = None
    for name in required or list(props):
        spec = props.get(name)
        kind = spec.get("type") if isinstance(spec, dict) else None
        if words_in is None and kind in ("string", None):
            words_in = name
            continue
        fixed[name] = _FIXED.get(str(kind))
    if not props and not required:
        words_in = "query"  # no schema: the shape labkit's tools default to
    head = json.dumps(fixed)[:-1]
    if words_in is None:
        return head, "}", False
    return head + (", " if fixed else "") + json.dumps(words_in) + ': "', '"}', True


_FIXED: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}


class Responder:
    """Answers requests under a schedule: ids, the scripted words, tool calls.

    `prefix`: makes the response ids of this server unique (``chatcmpl-PREFIX-N``).
    """

    def __init__(self, prefix: str, *, model: str = "labkit-truth", seed: int = 0) -> None:
        self.prefix = prefix
        self.model = model
        self.rng = random.Random(seed)
        #: The batch's flips draw apart from the rest, so a schedule without them draws
        #: exactly as before (`labkit.truth.batch`).
        self.batch_rng = random.Random(f"batch-{seed}")
        self.count = 0
        self.cache = PrefixCache()
        self.router = CacheRouter(self.cache)
        #: The pieces `/tokenize` has cut and the ones replies send, by id (`/detokenize`).
        self.vocabulary: dict[int, str] = {token_id(p): p for p in (*WORDS, *VOCABULARY)}
        self.vocabulary.update({i: p for p, i in SPECIAL_IDS.items()})

    def tokenize(self, text: str) -> list[int]:
        """`text`'s token ids by the server's tokenizer (`pieces`); each piece is kept for
        `detokenize`."""
        ids = []
        for piece in pieces(text):
            i = token_id(piece)
            self.vocabulary[i] = piece
            ids.append(i)
        return ids

    def detokenize(self, ids: list[int]) -> str:
        """The text of token ids the server knows (an unknown id is left out)."""
        return "".join(self.vocabulary.get(i, "") for i in ids)

    def reply(self, schedule: TruthSchedule, request: Request, batch: int | None = None) -> Reply:
        """The answer to `request` under `schedule` (overrides applied); `batch`: the batch
        it decodes in, where the schedule flips near-ties in large ones (`labkit.truth.batch`)."""
        rid = f"chatcmpl-{self.prefix}-{self.count}"
        self.count += 1
        # Only the cache needs the prompt's pieces (keyed by Python's hash: this process's
        # ids); a count is one C-level pass, so a long prompt holds the server's loop up little.
        text = request.prompt(schedule.chat_template)
        prompt: list[int] = []
        if schedule.cache_tokens:
            prompt = list(map(hash, pieces(text)))
        prompt_tokens = (
            len(prompt) if schedule.cache_tokens else prompt_count(text, schedule, count_pieces)
        )
        cached = 0
        cacheable = bool(schedule.cache_tokens) and prompt_tokens >= schedule.cache_min_tokens
        cache = self.router.cache_for(schedule.cache_replicas, request.cache_key)
        if cacheable and request.cache_prompt:
            cached = cache.lookup(prompt, schedule.cache_ttl_s)
        planned = plan(
            schedule,
            prompt_tokens,
            request.max_tokens,
            self.rng,
            cached,
            request.ignore_eos,
            reasoning=request.reasoning,
        )
        steps = self._steps(schedule, request, planned.output_tokens)
        flipped: list[int] = []
        if batch is not None:
            temperature = 1.0 if request.temperature is None else max(request.temperature, 0.0)
            cands = [s.candidates for s in steps]
            flipped = batch_flips(schedule, batch, temperature, cands, self.batch_rng)
            for i in flipped:  # the batch's arithmetic moved the second candidate on top
                (a, pa), (b, pb), *rest = steps[i].candidates
                steps[i] = Step(b, ((b, pa), (a, pb), *rest))
        if schedule.sampling:
            words = [s.token for s in steps]
        else:
            words = [WORDS[k % len(WORDS)] for k in range(planned.output_tokens)]
        texts = []
        k = 0
        for n in planned.event_tokens:
            texts.append("".join(words[k : k + n]))
            k += n
        if cacheable:
            output = list(map(hash, words))
            cache.store(prompt + output, schedule.cache_tokens, schedule.cache_ttl_s)
        reply = Reply(
            rid=rid,
            request=request,
            schedule=schedule,
            model=request.model or self.model,
            plan=planned,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            texts=texts,
            finish_reason="length" if planned.capped else schedule.finish_reason,
            steps=steps,
            batch=batch,
            flipped_steps=flipped,
        )
        if request.grammar_call is not None:
            self._grammar_reply(reply, request.grammar_call)
            return reply
        calls = self._calls(schedule, request, len(texts))
        if calls:
            self._tool_reply(reply, calls)
        return reply

    @staticmethod
    def _grammar_reply(reply: Reply, name: str) -> None:
        """The reply a forced-call grammar allows: one call's JSON as text, a piece an event
        on the schedule's gaps, ended on its own (the grammar is complete), logged as the
        call it makes (`text_calls`)."""
        words = "".join(WORDS).strip().split()
        query = ""
        for word in words:  # the grammar's words: [a-z][a-z ]{0,15}
            if len(query) + len(word) + (1 if query else 0) > 16:
                break
            query = f"{query} {word}" if query else word
        arguments = json.dumps({"query": query})
        text = f'{{"name": "{name}", "arguments": {arguments}}}'
        cut = pieces(text)
        planned = reply.plan
        interval = planned.gaps_ms[0] if planned.gaps_ms else reply.schedule.token_interval_ms
        gaps = [*planned.gaps_ms, *[interval] * max(0, len(cut) - 1 - len(planned.gaps_ms))]
        reply.plan = replace(
            planned,
            gaps_ms=gaps[: len(cut) - 1],
            event_tokens=[1] * len(cut),
            capped=False,
            end_token=reply.schedule.end_token,
            end_gap_ms=interval if reply.schedule.end_token else 0.0,
        )
        reply.texts = cut
        reply.steps = []
        reply.flipped_steps = []
        reply.finish_reason = "stop"
        reply.text_calls = [ToolCall(f"text_{reply.request.tool_results}", name, arguments)]

    def _steps(self, schedule: TruthSchedule, request: Request, n: int) -> list[Step]:
        """Each output token's step: drawn from its known distribution with sampling (at
        temperature 0 the likeliest, reported with the distribution at temperature 1, as
        llama.cpp reports it); the scripted word, certain, without."""
        if not schedule.sampling:
            if request.top_logprobs is None:
                return []
            return [Step(w, ((w, 1.0),)) for w in (WORDS[k % len(WORDS)] for k in range(n))]
        key = zlib.crc32(request.prompt_text.encode("utf-8"))
        temperature = 1.0 if request.temperature is None else max(request.temperature, 0.0)
        draw = self.rng if request.seed is None else random.Random(request.seed * 1_000_003 + key)
        steps = []
        for i in range(n):
            candidates = model_distribution(key, i, schedule, distribution)
            logits = [logit for _, logit in candidates]
            probs = _softmax(logits, temperature or 1.0)
            if temperature == 0:
                chosen = 0
            else:
                u, chosen = draw.random(), len(probs) - 1
                for j, p in enumerate(probs):
                    u -= p
                    if u < 0:
                        chosen = j
                        break
            pairs = tuple((word, p) for (word, _), p in zip(candidates, probs, strict=True))
            steps.append(Step(candidates[chosen][0], pairs))
        return steps

    @staticmethod
    def _calls(schedule: TruthSchedule, request: Request, events: int) -> int:
        """How many tool calls the reply makes (0: a text answer): while the history holds
        fewer tool results than `tool_calls`, or whenever the request forces a call
        (``required``, Anthropic's ``any``, or a named tool)."""
        if not request.tools or request.tool_choice == "none" or not events:
            return 0
        choice = request.tool_choice
        kind = choice.get("type") if isinstance(choice, dict) else choice
        forced = kind in ("required", "any", "tool", "function")
        if request.tool_results >= schedule.tool_calls and not forced:
            return 0
        return min(schedule.parallel_tool_calls, events)

    @staticmethod
    def _tool_reply(reply: Reply, calls: int) -> None:
        """Turn `reply`'s events into the pieces of `calls` tool calls of the first offered
        tool (or the one `tool_choice` names): each call's arguments are a JSON object whose
        first string property holds the words of its events."""
        request = reply.request
        chosen = request.tools[0]
        choice = request.tool_choice
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name") or choice.get("name")
            chosen = next((t for t in request.tools if t[0] == wanted), chosen)
        name, schema = chosen
        head, tail, with_words = _argument_frame(schema)
        n = len(reply.texts)
        call_of = [i * calls // n for i in range(n)]
        texts = []
        for i, words in enumerate(reply.texts):
            opens = i == 0 or call_of[i] != call_of[i - 1]
            piece = (words.lstrip() if opens else words) if with_words else ""
            if opens:
                piece = head + piece
            if i == n - 1 or call_of[i + 1] != call_of[i]:
                piece += tail
            texts.append(piece)
        step = request.tool_results
        joined: dict[int, list[str]] = {}
        for i, piece in enumerate(texts):
            joined.setdefault(call_of[i], []).append(piece)
        reply.texts = texts
        reply.call_of = call_of
        reply.tool_calls = [
            ToolCall(f"call_{step}_{c}", name, "".join(parts)) for c, parts in joined.items()
        ]
        reply.finish_reason = "tool_calls"
