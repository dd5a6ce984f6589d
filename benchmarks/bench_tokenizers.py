"""Offline o200k/cl100k: tiktoken built from bpe-openai's rank files, or bpe-openai's own tokenizer.

    python benchmarks/bench_tokenizers.py [--repeats 3]

Each measurement runs in a fresh interpreter, so load time and memory are a cold start's:
load = import + building the encoding; memory = resident set growth (VmRSS) over the load;
encode = a mixed text (English, code, emoji, Japanese) of about 100 KB, median of 5.
The two must agree on every id of the text; the script says where they do not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, sys, time
def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
which, name = sys.argv[1], sys.argv[2]
text = ("The quick brown fox jumps over the lazy dog. "
        "def f(x: int) -> int:\n    return x * 2\n"
        "🚀🔥✨ 👩‍💻 東京は日本の首都です。言語モデルは文章をトークンに分割して読みます。") * 600
rss0 = rss_kb()
t0 = time.perf_counter()
if which == "labkit":
    from labkit.tokenizers import offline_tokenizer
    tok = offline_tokenizer(name)
    encode = tok.encode
else:
    import bpe_openai
    enc = bpe_openai.get_encoding(name)
    encode = lambda s: enc.encode(s, disallowed_special=())
load_s = time.perf_counter() - t0
rss1 = rss_kb()
times = []
for _ in range(5):
    t = time.perf_counter()
    ids = encode(text)
    times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"load_s": load_s, "rss_mb": (rss1 - rss0) / 1024, "encode_ms": times[2] * 1e3,
                  "tokens": len(ids), "bytes": len(text.encode()),
                  "ids_hash": hash(tuple(ids))}))
"""


def _measure(which: str, name: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, which, name], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    """Print load time, memory and encode time side by side, per encoding."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cold starts per cell")
    args = parser.parse_args()
    print(f"{'encoding':<12} {'implementation':<34} {'load s':>8} {'RSS MB':>8} {'encode ms':>10}")
    for name in ("cl100k_base", "o200k_base"):
        runs: dict[str, list[dict[str, float]]] = {}
        for which in ("labkit", "bpe_openai"):
            runs[which] = [_measure(which, name) for _ in range(args.repeats)]
            label = (
                "tiktoken + bpe-openai's rank files"
                if which == "labkit"
                else "bpe-openai's own tokenizer"
            )
            med = {
                k: statistics.median(r[k] for r in runs[which])
                for k in runs[which][0]
                if k in ("load_s", "rss_mb", "encode_ms")
            }
            print(
                f"{name:<12} {label:<34} {med['load_s']:>8.2f} {med['rss_mb']:>8.0f} "
                f"{med['encode_ms']:>10.1f}"
            )
        a, b = runs["labkit"][0], runs["bpe_openai"][0]
        same = a["ids_hash"] == b["ids_hash"] and a["tokens"] == b["tokens"]
        print(
            f"{'':<12} {a['tokens']:.0f} tokens for {a['bytes']:.0f} bytes; the two agree: "
            f"{'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
