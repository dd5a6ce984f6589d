"""A hostile config fails with one line, in bounded memory and time: alias bombs, 20,000-deep
nesting, recursive aliases, huge numbers, non-finite numbers, oversized files, and (a
hypothesis property) any YAML text under the size bound.

Memory is measured with tracemalloc (the peak of Python allocations while the loader runs);
time is bounded by the amount of work the bounds allow, not asserted.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.boundedyaml import MAX_BYTES, MAX_DEPTH, MAX_NODES
from labkit.config import LabConfig, load_config, load_yaml_text
from labkit.errors import ConfigError

pytestmark = pytest.mark.unit

#: Far above what a config within the bounds takes (the worst case measured: ~40 MB).
PEAK_BYTES = 256 * 1024 * 1024


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    """The billion laughs: each level a list of `width` aliases of the one before."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _peak_while(fn: object) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()  # type: ignore[operator]
        return result, tracemalloc.get_traced_memory()[1]
    except ConfigError as exc:
        return exc, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HOSTILE = {
    "alias bomb": (_alias_bomb(), f"more than {MAX_NODES:,} values"),
    "flow nesting 20,000 deep": ("[" * 20_000 + "]" * 20_000, f"more than {MAX_DEPTH} levels"),
    "mapping nesting 20,000 deep": ("{a: " * 20_000 + "1" + "}" * 20_000, "levels deep"),
    "block nesting 200 deep": ("".join("  " * i + "a:\n" for i in range(200)), "levels deep"),
    "recursive alias": ("&a [*a]", "a recursive alias"),
    "an integer of 5,000 digits": ("x: " + "9" * 5000, "a value that cannot be read"),
    "infinity": ("x: .inf", "not a finite number"),
    "1.0e+400": ("x: [1, 1.0e+400]", "x[1]: inf is not a finite number"),
    "a date that does not exist": ("x: 2026-13-45", "a value that cannot be read"),
    "a Python object tag": ("x: !!python/object/apply:os.system [true]", "not valid YAML"),
    "too big": ("a: " + "x" * (MAX_BYTES + 1), f"larger than {MAX_BYTES // 1024} KiB"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_config_is_one_line_in_bounded_memory(tmp_path: Path, name: str) -> None:
    text, words = HOSTILE[name]
    path = tmp_path / "hostile.yaml"
    path.write_text(text, encoding="utf-8")
    caught, peak = _peak_while(lambda: load_config(path))
    assert isinstance(caught, ConfigError), caught
    message = str(caught)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert words in message
    assert peak < PEAK_BYTES


def test_aliases_within_the_bound_still_load() -> None:
    data = load_yaml_text("base: &b {temperature: 0}\nother: *b\nmerged: {<<: *b, top_p: 1}\n")
    assert data == {
        "base": {"temperature": 0},
        "other": {"temperature": 0},
        "merged": {"temperature": 0, "top_p": 1},
    }


def test_a_file_far_larger_than_the_bound_is_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(64 * 1024 * 1024)  # 64 MiB of zeros, sparse on disk
    caught, peak = _peak_while(lambda: load_config(path))
    assert isinstance(caught, ConfigError)
    assert peak < 8 * MAX_BYTES


# --- The property: any YAML text under the size bound ---------------------------------------

_PIECES = st.sampled_from(
    [
        "a: ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        ": ",
        "\n",
        "  ",
        "&x ",
        "*x",
        "&y ",
        "*y",
        "<<: ",
        "? ",
        "!!binary ",
        "!!python/name:os.system ",
        "!!str ",
        "!!int ",
        "'",
        '"',
        "|\n",
        ">-\n",
        "#",
        "---\n",
        "...\n",
        "%YAML 1.1\n",
        "1e400",
        ".inf",
        ".nan",
        "9" * 60,
        "2026-02-30",
        "0x",
        "0b102",
        "~",
        "null",
        "true",
        "\x1b[2J",
        "\t",
        "\x00",
        "\ufeff",
        "name: x\n",
        "providers: ",
        "experiments: ",
        "kind: fake",
        "id: ",
        "output_dir: ",
        "sk-proj-AbCdEfGh0123456789xyz",
        "http://u:p@h/",
    ]
)
_YAML_ISH = st.lists(_PIECES | st.text(max_size=8), max_size=80).map("".join)


def _bombs(levels: int, width: int) -> str:
    return _alias_bomb(levels, width)


_TEXTS = st.one_of(
    _YAML_ISH,
    st.text(max_size=400),
    st.builds(
        lambda n, o: o * n + "x" + {"[": "]", "{": "}"}.get(o, "") * n,
        st.integers(1, 3000),
        st.sampled_from(["[", "{", "- ", "a: ", "? "]),
    ),
    st.builds(_bombs, st.integers(1, 12), st.integers(1, 12)),
    # One long word in each place a secret or a URL is looked for (a search that backtracks
    # would take minutes here).
    st.builds(
        lambda field, piece, n: f"name: r\n{field}{piece * n}\n",
        st.sampled_from(["description: ", "output_dir: ", "x: ", "- "]),
        st.sampled_from(["a", "a://", "sk-", "Aa1", "http://u", "@"]),
        st.integers(1, 60_000),
    ),
)


@given(_TEXTS)
def test_any_yaml_text_loads_or_fails_with_one_line_in_bounded_memory(text: str) -> None:
    assert len(text.encode("utf-8", "surrogatepass")) <= MAX_BYTES

    def load() -> object:
        data = load_yaml_text(text, "prop.yaml")
        if isinstance(data, dict):
            from labkit.config import parse_config

            return parse_config(data, "prop.yaml")
        return data

    result, peak = _peak_while(load)
    if isinstance(result, ConfigError):
        lines = str(result).splitlines()
        assert lines[0].startswith("prop.yaml: ")
        # One problem is one line; several are one heading line and an indented list.
        assert all(line.startswith("  - ") for line in lines[1:])
    elif isinstance(result, LabConfig):
        assert result.providers and result.experiments
    assert peak < PEAK_BYTES


# --- Through the command, as a process --------------------------------------------------------


def _limited_memory() -> None:  # in the child: 1 GiB of address space, 60 s of CPU
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


@pytest.mark.parametrize("name", ["alias bomb", "flow nesting 20,000 deep", "1.0e+400"])
def test_labkit_run_of_a_hostile_config_is_one_error_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE[name][0], encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=_limited_memory,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert HOSTILE[name][1] in done.stderr
    assert not out.exists()  # refused before any run folder is made
