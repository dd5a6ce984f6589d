"""`labkit tokens` through typer's CliRunner: offline encodings side by side, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.tokenizers import cli as tokens_cli

pytestmark = pytest.mark.unit

TEXT = "こんにちは、世界 👋 def f(): pass"


@pytest.fixture(autouse=True)
def _no_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """`local` needs llama-server: unit tests stand in a refusal for it (the e2e tier runs
    the real one)."""

    async def not_set_up(text: str) -> object:
        raise tokens_cli._NeedsSetup("not set up here; run `labkit setup`")

    monkeypatch.setattr(tokens_cli, "_local_cut", not_set_up)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["tokens", *args])
    return result.exit_code, result.stdout, result.stderr


def test_default_shows_cl100k_and_o200k_side_by_side_and_says_why_local_is_missing() -> None:
    code, out, _ = run(TEXT)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "24 characters, 43 UTF-8 bytes"
    assert lines[1].split() == [
        "cl100k_base",
        "11",
        "tokens,",
        "2.18",
        "chars/token,",
        "3.91",
        "bytes/token",
    ]
    assert lines[2] == "こんにちは|、|\\xe4\\xb8|\\x96|界| \\xf0\\x9f\\x91|\\x8b| def| f|():| pass"
    assert lines[3].startswith("o200k_base") and "9 tokens" in lines[3]
    assert lines[4] == "こんにちは|、|世界| \\xf0\\x9f\\x91|\\x8b| def| f|():| pass"
    assert lines[5].startswith("local") and "not available: not set up here" in lines[5]


def test_ids_and_model_names() -> None:
    code, out, _ = run("2 + 2 = 4", "-t", "gpt-4o", "-t", "cl100k_base", "--ids")
    assert code == 0
    assert "gpt-4o (o200k_base)  7 tokens" in out
    assert "ids: 17 659 220 17 314 220 19" in out  # OpenAI cookbook, o200k_base
    assert "ids: 17 489 220 17 284 220 19" in out  # OpenAI cookbook, cl100k_base


def test_file_input_and_pipes_escaped(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("a|b\n", encoding="utf-8")
    code, out, _ = run("--file", str(f), "-t", "o200k_base")
    assert code == 0
    assert out.splitlines()[2] == "a|\\||b|\\n"


def test_control_characters_never_reach_the_terminal() -> None:
    code, out, _ = run("\x1b]0;pwned\x07red\x1b[31m", "-t", "cl100k_base")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b" in out and "\\x07" in out


def test_local_asked_for_by_name_fails_with_one_line() -> None:
    code, _, err = run("hi", "-t", "local")
    assert code == 1
    assert err.strip() == "error: local: not set up here; run `labkit setup`"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "r50k_base", "x"], "unknown tokenizer 'r50k_base'"),
        ([], "give the text as an argument or with --file"),
        (["--file", "/nonexistent/t.txt"], "cannot read /nonexistent/t.txt"),
    ],
)
def test_user_errors(args: list[str], message: str) -> None:
    code, _, err = run(*args)
    assert code == 1
    assert message in err
