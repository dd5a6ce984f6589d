"""Per-event cost of reading a stream with logprobs off (before/after) and on.

The hot path the logprobs capability touches: SSE framing + the Chat Completions parser
(`LlamaCppParser`, as the bundled server is read) over a llama.cpp-shaped stream, one chunk per
read, CPU ns per event (`time.thread_time_ns`). With logprobs off the parser must cost what
it cost before the capability existed: `--before REV` (default 3e8a946) extracts labkit's
package at git REV and times it in its own process beside this tree's, rounds alternating,
medians of the rounds. With logprobs on: the same stream carrying `top_logprobs: 5` entries
on every token chunk, read by a parser asked for them, beside the same stream read by a
parser that was not asked (it skips them, as before).

Run: `.venv/bin/python benchmarks/bench_logprobs.py [--before REV] [--rounds N]`. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
N_EVENTS = 5_000
TOP_K = 5
READS = 9  # reads of the stream per process; the process's median is one round's figure


def stream(with_logprobs: bool) -> list[bytes]:
    """llama-server's chat chunks, one token each, then the finish chunk and [DONE]."""
    out = []
    for i in range(N_EVENTS):
        choice: dict[str, object] = {
            "finish_reason": None,
            "index": 0,
            "delta": {"content": f" tok{i}"},
        }
        if with_logprobs:
            top = [
                {"id": k, "token": f" alt{k}", "bytes": [32, 97], "logprob": -0.5 - k}
                for k in range(TOP_K)
            ]
            choice["logprobs"] = {
                "content": [
                    {
                        "id": i,
                        "token": f" tok{i}",
                        "bytes": [32, 116],
                        "logprob": -0.5,
                        "top_logprobs": top,
                    }
                ]
            }
        obj = {
            "choices": [choice],
            "created": 1764581300,
            "id": "chatcmpl-bench",
            "model": "m",
            "system_fingerprint": "b1-0c1e570",
            "object": "chat.completion.chunk",
        }
        out.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def time_one(chunks: list[bytes], asked: bool) -> float:
    """CPU ns per event of framing + parsing `chunks` once."""
    from labkit.providers.llamacpp import LlamaCppParser
    from labkit.wire.sse import SSEParser

    sse = SSEParser()
    parser = LlamaCppParser()
    if asked:
        parser.want_logprobs(TOP_K)  # only this tree has it: never asked of the before tree
    t0 = time.thread_time_ns()
    for c in chunks:
        for ev in sse.feed(c, 0):
            parser.on_event(ev)
    if asked:
        parser.logprobs()  # once per record, in the recorder
    return (time.thread_time_ns() - t0) / len(chunks)


def child(case: str) -> None:
    """One round in this process: print ns/event of `case` as JSON."""
    with_lp, asked = {"off": (False, False), "skip": (True, False), "on": (True, True)}[case]
    chunks = stream(with_lp)
    time_one(chunks, asked)  # warm up
    print(json.dumps(statistics.median(time_one(chunks, asked) for _ in range(READS))))


def run_child(src: Path, case: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", case],
        env=env,
        cwd=src,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="3e8a946", help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", choices=["off", "skip", "on"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-logprobs-") as tmp:
        before = Path(tmp)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.before, "labkit"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        cases = [
            ("before", before, "off"),
            ("after", REPO, "off"),
            ("before", before, "skip"),
            ("after", REPO, "skip"),
            ("after", REPO, "on"),
        ]
        got: dict[tuple[str, str], list[float]] = {(w, c): [] for w, _, c in cases}
        for _ in range(args.rounds):
            for who, src, case in cases:
                got[(who, case)].append(run_child(src, case))
    med = {k: statistics.median(v) for k, v in got.items()}
    print(
        f"SSE framing + LlamaCppParser, {N_EVENTS} token chunks, CPU ns/event "
        f"(median of {args.rounds} rounds, each the median of {READS} reads, processes "
        "alternating; the range's low end: the rounds least disturbed by other processes):"
    )
    off_b, off_a = med[("before", "off")], med[("after", "off")]
    skip_b, skip_a = med[("before", "skip")], med[("after", "skip")]
    print(
        f"  logprobs off, plain stream      : {args.before} {off_b:6.0f}   this tree {off_a:6.0f}"
        f"   ({(off_a / off_b - 1) * 100:+.1f} %)"
    )
    print(
        f"  logprobs off, stream carries top-{TOP_K}: {args.before} {skip_b:6.0f}   this tree "
        f"{skip_a:6.0f}   ({(skip_a / skip_b - 1) * 100:+.1f} %)"
    )
    on = med[("after", "on")]
    print(
        f"  logprobs on (top-{TOP_K} read)       : this tree {on:6.0f}   "
        f"({on / skip_a:.2f}x the same stream unread)"
    )
    spread = {k: (min(v), max(v)) for k, v in got.items()}
    print(
        "  rounds' range: "
        + ", ".join(f"{w} {c} {lo:.0f}-{hi:.0f}" for (w, c), (lo, hi) in spread.items())
    )


if __name__ == "__main__":
    main()
