"""`labkit tokens` through typer's CliRunner: offline encodings side by side, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.cli import tokens as tokens_cli

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


CONFIG = """
name: t
providers:
  - {id: vllm, kind: openai_compatible, base_url: "http://vllm.test:8000/v1", model: my-model,
      transport: httpx}
  - {id: claude, kind: anthropic, model: claude-x, api_key_env: ANTHROPIC_API_KEY}
  - {id: scripted, kind: fake}
experiments: [{kind: single}]
"""


def test_configured_providers_by_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    import respx

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    cfg = tmp_path / "lab.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    with respx.mock() as router:
        router.post("http://vllm.test:8000/tokenize").mock(
            return_value=httpx.Response(
                200, json={"count": 2, "tokens": [9906, 1917], "token_strs": ["Hello", "Ġworld"]}
            )
        )
        router.post("https://api.anthropic.com/v1/messages/count_tokens").mock(
            return_value=httpx.Response(200, json={"input_tokens": 9})
        )
        code, out, err = run(
            "Hello world", "-c", str(cfg), "-t", "vllm", "-t", "claude", "-t", "scripted", "--ids"
        )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("vllm (my-model)") and "2 tokens" in lines[1]
    assert lines[2] == "Hello| world"
    assert lines[3] == "ids: 9906 1917"
    assert lines[4].startswith("claude (claude-x)") and "9 tokens" in lines[4]
    assert "counts only (no token boundaries)" in lines[4]
    assert lines[5].startswith("scripted") and "offers no tokenizer" in lines[5]
    assert "sk-ant-test" not in out + err


def test_a_configured_provider_without_its_key_is_one_error_line(tmp_path: Path) -> None:
    cfg = tmp_path / "lab.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    code, _, err = run("hi", "-c", str(cfg), "-t", "claude")
    assert code == 1
    assert "set ANTHROPIC_API_KEY" in err and len(err.strip().splitlines()) == 1


def test_text_from_stdin() -> None:
    result = CliRunner().invoke(
        app, ["tokens", "--file", "-", "-t", "cl100k_base"], input="hello world"
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines()[2] == "hello| world"


def test_a_terminal_gets_alternating_colours_and_no_separators() -> None:
    line = tokens_cli._pieces_line((b"hello", b" world", b"\x1b[2J"), terminal=True)
    assert line.plain == "hello world\\x1b[2J"
    styles = [str(span.style) for span in line.spans]
    assert styles == ["black on cyan", "black on yellow", "black on cyan"]


def test_a_file_over_the_cap_is_one_line_and_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens_cli, "MAX_TEXT_BYTES", 64)
    at_cap = tmp_path / "at.txt"
    at_cap.write_text("a" * 64)
    code, out, _ = run("--file", str(at_cap), "-t", "cl100k_base")
    assert code == 0 and out.startswith("64 characters, 64 UTF-8 bytes")
    over = tmp_path / "over.txt"
    over.write_text("a" * 65)
    for args, stdin in (
        (["--file", str(over)], None),
        (["--file", "-"], "b" * 65),
        (["c" * 65], None),
    ):
        result = CliRunner().invoke(app, ["tokens", *args, "-t", "cl100k_base"], input=stdin)
        assert result.exit_code == 1
        assert "over 0 MiB; labkit tokens shows every token" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_a_file_that_is_not_utf8_names_its_line_and_byte(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    f.write_bytes(b"first line\ncaf\xe9\n")
    code, out, err = run("--file", str(f))
    assert code == 1 and out == ""
    assert f"{f}:2: not UTF-8 (byte 0xe9 at offset 14)" in err.replace("\n", "")
    assert "Traceback" not in err
