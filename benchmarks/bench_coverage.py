"""Honest intervals, measured: how often the lab's stated 95% intervals hold the truth.

Runs the quickstart `--runs` times (default 20) against the truth server, each with its own
seed (so the server's jitter and its sampling draws differ run to run), grades each run's
answers (`labkit.scoring.grading`) and prints, per stated figure, the share of runs whose
interval covered the truth: the truth of that run's requests (what the grader checks), and,
where the server's schedule fixes a true value of its own (a generated token every 4 ms, a
prompt token read in 1 ms), that value too — the coverage an interval is built to have.
A share below 90% is flagged: an interval that covers far less than 95% is wrong.

Run: `make bench-coverage` or `.venv/bin/python benchmarks/bench_coverage.py [--runs N]`
(about half a minute a run on 2 cores). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
from collections import defaultdict
from pathlib import Path

from labkit.cli.truthrun import TruthLab
from labkit.config import load_config_data, parse_config
from labkit.runner import RunOptions, prepare_run
from labkit.scoring.grading import grade_run
from labkit.scoring.grading.base import TOLERANCE, Check
from labkit.truth.log import read_truth_log
from labkit.truth.schedule import LAB_SCHEDULE

QUICKSTART = Path(__file__).resolve().parents[1] / "labkit" / "examples" / "quickstart.yaml"

#: Figures whose true value the schedule fixes (the population an interval is about).
_DECODE = LAB_SCHEDULE["token_interval_ms"]
_PROMPT = LAB_SCHEDULE["prefill_ms_per_token"]
SCHEDULED: dict[str, float] = {
    "single · local · decode per token (median)": _DECODE,
    "prefill_decode · local · a prompt token's cost": _PROMPT,
    "prefill_decode · local · a generated token's cost": _DECODE,
    "prefill_decode · local · generated / prompt token cost": _DECODE / _PROMPT,
    "attribution · local · provider queue (mean)": 0.0,
}
FLAG = 0.90
#: The divergence's tokens differ run to run: its figures pool under one name.
_SPLIT_TOKEN = re.compile(r"p of .* at token \d+")


def one_run(seed: int, out: Path) -> list[Check]:
    """The quickstart once against a truth server seeded `seed`: its graded checks."""
    raw = load_config_data(QUICKSTART)
    with TruthLab(raw, seed=seed) as lab:
        runner = prepare_run(parse_config(lab.config, str(QUICKSTART)), RunOptions(out_dir=out))
        try:
            asyncio.run(runner.run())
        finally:
            runner.folder.release()
        log = lab.keep_log(runner.folder.path)
        return grade_run(runner.folder.path, read_truth_log(log)).checks


def _covers(c: Check, truth: float) -> bool:
    tol = c.tolerance if c.tolerance is not None else TOLERANCE.get(c.unit, 0.0)
    if c.value is None:
        return False
    lo = (c.lo if c.lo is not None else c.value) - tol
    hi = (c.hi if c.hi is not None else (float("inf") if c.lo is not None else c.value)) + tol
    return lo <= truth <= hi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    sample: dict[str, list[bool]] = defaultdict(list)
    scheduled: dict[str, list[bool]] = defaultdict(list)
    wrong_facts: dict[str, int] = defaultdict(int)
    with tempfile.TemporaryDirectory(prefix="bench-coverage-") as tmp:
        for seed in range(args.runs):
            checks = one_run(seed, Path(tmp))
            for c in checks:
                key = _SPLIT_TOKEN.sub("p of a branch at the split", f"{c.answer} · {c.name}")
                if c.kind == "fact":
                    wrong_facts[key] += c.ok is False
                    continue
                if c.ok is not None and c.lo is not None:  # an interval: what coverage is of
                    sample[key].append(c.ok)
                if key in SCHEDULED:
                    scheduled[key].append(_covers(c, SCHEDULED[key]))
            print(f"run {seed + 1}/{args.runs}: {sum(c.ok is False for c in checks)} missed")
    rows = []
    print(f"\n{'figure':72} {'this run':>9} {'schedule':>9}")
    for key in sorted(sample):
        got = sample[key]
        share = sum(got) / len(got)
        pop = scheduled.get(key)
        pop_share = sum(pop) / len(pop) if pop else None
        low = share < FLAG or (pop_share is not None and pop_share < FLAG)
        pop_text = f"{pop_share:9.0%}" if pop_share is not None else f"{'—':>9}"
        print(f"{key[:72]:72} {share:9.0%} {pop_text}{'  < 90%' if low else ''}")
        rows.append({"figure": key, "runs": len(got), "covered": share, "schedule": pop_share})
    facts = {k: v for k, v in wrong_facts.items() if v}
    print(f"\nwrong facts over {args.runs} runs: {facts or 'none'}")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": args.runs, "figures": rows, "wrong_facts": facts}))


if __name__ == "__main__":
    main()
