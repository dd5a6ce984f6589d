"""Request traces: arrival times and input/output lengths read from a file, and prompts
built to a trace entry's length.

Two formats: Mooncake JSONL (``.jsonl``: ``timestamp`` in ms, ``input_length``,
``output_length``, ``hash_ids``, one id per block of prompt tokens; requests sharing leading
ids share that prefix) and CSV (``.csv``: a header ``timestamp,input_tokens,output_tokens``).
"""

from __future__ import annotations

import contextlib
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labkit.errors import ConfigError
from labkit.jsonlines import iter_json_lines
from labkit.workloads.agent_traces import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_TURNS
from labkit.workloads.sizing import PromptSizing, filler_text

__all__ = ["TraceEntry", "read_trace", "trace_prompt"]


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace: when it arrives and how long its prompt and answer are."""

    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def read_trace(path: Path, time_unit: Literal["ms", "s"] = "ms") -> list[TraceEntry]:
    """The entries of a Mooncake JSONL or a `timestamp,input_tokens,output_tokens` CSV
    trace, in arrival order, read a line at a time within the agent traces' limits
    (`labkit.workloads.agent_traces`: lengths, hash ids, `MAX_TURNS` entries; times finite);
    ConfigError naming ``file:line`` for anything else."""
    scale = 1000.0 if time_unit == "s" else 1.0
    entries: list[TraceEntry] = []
    if path.suffix.lower() == ".csv":
        entries = _read_csv(path, scale)
    else:
        with contextlib.closing(iter_json_lines(path, "trace")) as lines:
            for line in lines:
                obj, n = line.value, line.number
                if not isinstance(obj, dict):
                    raise ConfigError(f"trace {path}:{n}: not a JSON object")
                if len(entries) >= MAX_TURNS:
                    raise ConfigError(f"trace {path}:{n}: more than labkit's limit of {MAX_TURNS}")
                entry = _entry(
                    path,
                    n,
                    obj.get("timestamp"),
                    obj.get("input_length"),
                    obj.get("output_length"),
                    scale,
                )
                hash_ids = obj.get("hash_ids") or []
                if not isinstance(hash_ids, list) or not all(
                    isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
                ):
                    raise ConfigError(f"trace {path}:{n}: hash_ids must be a list of integers")
                if len(hash_ids) > MAX_PROMPT_TOKENS:
                    raise ConfigError(f"trace {path}:{n}: more than {MAX_PROMPT_TOKENS} hash_ids")
                entries.append(
                    TraceEntry(
                        entry.timestamp_ms, entry.input_tokens, entry.output_tokens, tuple(hash_ids)
                    )
                )
    if not entries:
        raise ConfigError(f"trace {path}: no requests")
    return sorted(entries, key=lambda e: e.timestamp_ms)


def _read_csv(path: Path, scale: float) -> list[TraceEntry]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = csv.DictReader(f)
            need = {"timestamp", "input_tokens", "output_tokens"}
            if not need <= set(rows.fieldnames or []):
                raise ConfigError(
                    f"trace {path}: the CSV header must name {', '.join(sorted(need))}"
                )
            entries: list[TraceEntry] = []
            for n, row in enumerate(rows, start=2):
                if len(entries) >= MAX_TURNS:
                    raise ConfigError(f"trace {path}:{n}: more than labkit's limit of {MAX_TURNS}")
                entries.append(
                    _entry(
                        path, n, row["timestamp"], row["input_tokens"], row["output_tokens"], scale
                    )
                )
            return entries
    except OSError as exc:
        raise ConfigError(f"trace {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"trace {path}: not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise ConfigError(f"trace {path}: not CSV ({exc})") from None


def _entry(path: Path, line: int, ts: Any, n_in: Any, n_out: Any, scale: float) -> TraceEntry:
    try:
        timestamp = float(ts)
        inputs, outputs = int(n_in), int(n_out)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"trace {path}:{line}: timestamp, input and output lengths must be numbers"
        ) from None
    if not (math.isfinite(timestamp) and timestamp >= 0) or inputs < 1 or outputs < 1:
        raise ConfigError(
            f"trace {path}:{line}: a finite timestamp >= 0 and lengths >= 1 (got {ts!r:.40}, "
            f"{n_in!r:.40}, {n_out!r:.40})"
        )
    if inputs > MAX_PROMPT_TOKENS or outputs > MAX_OUTPUT_TOKENS:
        raise ConfigError(
            f"trace {path}:{line}: lengths over labkit's limits ({MAX_PROMPT_TOKENS} input, "
            f"{MAX_OUTPUT_TOKENS} output tokens)"
        )
    return TraceEntry(timestamp * scale, inputs, outputs)


def trace_prompt(
    entry: TraceEntry,
    i: int,
    salt: str,
    sizing: PromptSizing,
    *,
    block_tokens: int,
    header_tokens: int,
    framing_tokens: int = 0,
) -> str:
    """Request `i`'s prompt, about `entry.input_tokens` tokens as the provider counts its
    input (less the `framing_tokens` its chat template adds): the text of each hash block
    (the same for the same id and `salt`, so a prefix cache sees the trace's sharing), then
    words of its own for any rest. Every piece opens with a header of `header_tokens`."""

    def words(tokens: int) -> int:
        return sizing.words_for(tokens - header_tokens)

    parts: list[str] = []
    remaining = entry.input_tokens - framing_tokens
    for block in entry.hash_ids:
        if remaining <= 0:
            break
        n = min(block_tokens, remaining)
        parts.append(f"[{salt}:{block:06d}] " + filler_text(words(n), block))
        remaining -= n
    if remaining > 0 or not parts:
        parts.append(f"[{salt}/{i:06d}] " + filler_text(words(remaining), i))
    return " ".join(parts)
