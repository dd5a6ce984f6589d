"""Tool calls in each provider's own format: the definitions a request carries, the
assistant's call and the tool's result as the next turn appends them.

A provider that can take tools answers `Provider.tool_format()` with one `ToolFormat`;
an experiment (a `session`) builds every tool turn through it and never looks at a kind.
The formats: OpenAI Chat, the Responses API, Anthropic, Ollama, and llama.cpp's
grammar-forced call for a model whose chat template knows no tools (the bundled SmolLM2),
read back from the reply's text into the record's `tool_calls` (`GrammarTools`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from labkit.records import RecordToolCall, RequestRecord

__all__ = [
    "FORCED_CALL_MARK",
    "AnthropicTools",
    "GrammarTools",
    "OllamaTools",
    "OpenAIChatTools",
    "ResponsesTools",
    "ToolChoice",
    "ToolFormat",
    "ToolResult",
    "ToolSpec",
]

#: Whether a turn may (`auto`), must (`required`) or must not (`none`) call a tool.
ToolChoice: TypeAlias = Literal["auto", "required", "none"]

Message: TypeAlias = dict[str, Any]


class ToolSpec(BaseModel):
    """One tool a request offers: a function with a JSON-schema of its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = "A tool."
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
        description="JSON schema of the arguments.",
    )


class ToolResult(BaseModel):
    """What a (simulated) tool returned for one call."""

    model_config = ConfigDict(extra="forbid")

    call: RecordToolCall
    content: str


def _arguments(call: RecordToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class ToolFormat(ABC):
    """How one provider takes tool definitions, calls and results."""

    #: Whether tool calls come back as the provider's own call objects (False: read from
    #: the reply's text, as a grammar-forced call).
    native: bool = True

    @abstractmethod
    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """Request parameters offering `tools` with `choice`."""

    @abstractmethod
    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """The messages (or items) that append the model's reply carrying `calls`."""

    @abstractmethod
    def results(self, results: list[ToolResult]) -> list[Message]:
        """The messages (or items) that append the tools' results."""

    def closing(self, choice: ToolChoice) -> list[Message]:
        """Messages that end one turn's request after the history, not kept in it (none for
        a provider that takes tools natively)."""
        return []

    def calls_in_text(self, params: Mapping[str, Any], text: str) -> list[RecordToolCall] | None:
        """The calls a reply wrote as text on a turn this format forced to call (`params`:
        the request's parameters as sent); None where the provider sends its calls as its
        own call objects, or the turn was not forced. The recorder asks this of every
        reply without a call object, so it must be cheap."""
        return None

    def calls_in(self, record: RequestRecord) -> list[RecordToolCall]:
        """The tool calls of one reply (none: a final answer)."""
        return list(record.tool_calls or [])


class OpenAIChatTools(ToolFormat):
    """Chat Completions: `tools` of `function`s, the assistant's `tool_calls`, role `tool`."""

    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """`tools` and `tool_choice`."""
        return {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ],
            "tool_choice": choice,
        }

    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """One assistant message with its `tool_calls`."""
        return [
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments or "{}"},
                    }
                    for c in calls
                ],
            }
        ]

    def results(self, results: list[ToolResult]) -> list[Message]:
        """One `tool` message per call."""
        return [{"role": "tool", "tool_call_id": r.call.id, "content": r.content} for r in results]


class ResponsesTools(ToolFormat):
    """The Responses API: flat `function` tools, `function_call` and `function_call_output`
    input items."""

    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """`tools` and `tool_choice`."""
        return {
            "tools": [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
                for t in tools
            ],
            "tool_choice": choice,
        }

    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """The reply's text (when any) and one `function_call` item per call."""
        items: list[Message] = [{"role": "assistant", "content": text}] if text else []
        items += [
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.arguments or "{}",
            }
            for c in calls
        ]
        return items

    def results(self, results: list[ToolResult]) -> list[Message]:
        """One `function_call_output` item per call."""
        return [
            {"type": "function_call_output", "call_id": r.call.id, "output": r.content}
            for r in results
        ]


class AnthropicTools(ToolFormat):
    """Anthropic Messages: `input_schema` tools, `tool_use` and `tool_result` blocks."""

    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """`tools` and `tool_choice` (`any` for required)."""
        kind = {"auto": "auto", "required": "any", "none": "none"}[choice]
        return {
            "tools": [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ],
            "tool_choice": {"type": kind},
        }

    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """One assistant message of text and `tool_use` blocks."""
        blocks: list[Message] = [{"type": "text", "text": text}] if text else []
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c)} for c in calls
        ]
        return [{"role": "assistant", "content": blocks}]

    def results(self, results: list[ToolResult]) -> list[Message]:
        """One user message of `tool_result` blocks."""
        return [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": r.call.id, "content": r.content}
                    for r in results
                ],
            }
        ]


class OllamaTools(ToolFormat):
    """Ollama's chat: `tools` as OpenAI's, calls with object arguments, role `tool` with
    `tool_name`. Ollama has no `tool_choice`: `none` offers no tools."""

    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """`tools` (none under `none`)."""
        if choice == "none":
            return {}
        return {"tools": OpenAIChatTools().params(tools, choice)["tools"]}

    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """One assistant message with `tool_calls`."""
        return [
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"function": {"name": c.name, "arguments": _arguments(c)}} for c in calls
                ],
            }
        ]

    def results(self, results: list[ToolResult]) -> list[Message]:
        """One `tool` message per call."""
        return [{"role": "tool", "tool_name": r.call.name, "content": r.content} for r in results]


#: The first line of the grammar `GrammarTools` forces a call with: how a forced turn is known
#: again from the request's parameters as the record keeps them.
FORCED_CALL_MARK = "# labkit: a forced tool call"


def _query_words(call: RecordToolCall) -> str:
    args = _arguments(call)
    return ", ".join(f'{k} "{v}"' for k, v in args.items()) or "no arguments"


class GrammarTools(ToolFormat):
    """llama.cpp with a chat template that knows no tools: a GBNF grammar (llama-server's
    `grammar`) forces the reply to be one call's JSON, compact, and the recorder reads the
    call from that text (`calls_in_text`). The call and its result go back as plain-language
    messages, and the turn that is not forced ends with a short instruction to answer in
    words: a small model shown JSON answers with JSON."""

    native = False

    def params(self, tools: list[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
        """`grammar` forcing a call under `required`; nothing otherwise (the model answers
        in text)."""
        if choice != "required":
            return {}
        names = " | ".join(f'"\\"{t.name}\\""' for t in tools)
        # Fixed layout, no free whitespace, short lower-case words: a small model given a
        # JSON schema's free whitespace or string pads the call until max_tokens cuts it.
        grammar = (
            f"{FORCED_CALL_MARK}\n"
            'root ::= "{\\"name\\": " name ", \\"arguments\\": {\\"query\\": \\"" '
            '[a-z] [a-z ]{0,15} "\\"}}"\n'
            f"name ::= {names}\n"
        )
        return {"grammar": grammar}

    def assistant(self, text: str, calls: list[RecordToolCall]) -> list[Message]:
        """The call told in words (the forced JSON is not shown back to the model)."""
        said = " ".join(f"I called the {c.name} tool with {_query_words(c)}." for c in calls)
        return [{"role": "assistant", "content": said or text}]

    def results(self, results: list[ToolResult]) -> list[Message]:
        """One user message holding each tool's text as it returned it (no lead-in: the
        bundled model repeats a "The tool returned:" lead-in until max_tokens)."""
        return [{"role": "user", "content": "\n\n".join(r.content for r in results)}]

    def closing(self, choice: ToolChoice) -> list[Message]:
        """On a turn not forced to call: ask for the answer in words."""
        if choice == "required":
            return []
        return [
            {
                "role": "user",
                "content": "Now give your final answer to the task in one or two plain sentences.",
            }
        ]

    def calls_in_text(self, params: Mapping[str, Any], text: str) -> list[RecordToolCall] | None:
        """On a turn this format forced (its grammar among `params`): the call the reply's
        text holds, named `text_0`; none when the text is no complete call (cut by
        `max_tokens`). A free answer that looks like a call is an answer."""
        grammar = params.get("grammar")
        if not isinstance(grammar, str) or not grammar.startswith(FORCED_CALL_MARK):
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return []
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return []
        args = value.get("arguments")
        return [
            RecordToolCall(
                id="text_0",
                name=value["name"],
                arguments=json.dumps(args if isinstance(args, dict) else {}),
                source="text",
            )
        ]
