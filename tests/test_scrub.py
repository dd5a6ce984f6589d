"""labkit.scrub: a registered key is masked in every encoding; control sequences are stripped;
keys are read stripped, checked and registered; key-shaped variable names are refused."""

from __future__ import annotations

import base64
import html
import io
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table
from rich.text import Text

from labkit import scrub
from labkit.config import looks_like_key, parse_config
from labkit.errors import ConfigError, ProviderUnavailable
from labkit.providers import provider_class, provider_kinds
from labkit.terminal import SafeConsole
from labkit.wire.proxies import is_loopback, proxy_for

pytestmark = pytest.mark.unit

KEY = "sk-proj-Zq81xPLANTEDv9Kd0Tw/3+Hc_aQ7yB-Ue2rL"


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test registers its own secrets; the process-wide set is restored after."""
    monkeypatch.setattr(scrub, "_secrets", ())
    monkeypatch.setattr(scrub, "_plain", None)
    monkeypatch.setattr(scrub, "_json", None)
    yield


def _hex_lower(text: str) -> str:
    return urllib.parse.quote(text, safe="").replace("%2F", "%2f").replace("%2B", "%2b")


def encodings(key: str) -> dict[str, str]:
    """Every form of `key` a server or a library could write."""
    raw = key.encode()
    return {
        "raw": key,
        "json": json.dumps(key)[1:-1],
        "json slash": json.dumps(key)[1:-1].replace("/", "\\/"),
        "json every char": "".join(f"\\u{ord(c):04x}" for c in key),
        "json every char upper": "".join(f"\\u{ord(c):04X}" for c in key),
        "json mixed": "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(key)),
        "repr": repr(key),
        "repr hex": "".join(f"\\x{ord(c):02x}" for c in key),
        "quote": urllib.parse.quote(key, safe=""),
        "quote lower hex": _hex_lower(key),
        "quote every char": "".join(f"%{ord(c):02X}" for c in key),
        "quote_plus": urllib.parse.quote_plus(key),
        "html escape": html.escape(key),
        "html decimal": "".join(f"&#{ord(c)};" for c in key),
        "html hex": "".join(f"&#x{ord(c):X};" for c in key),
        "base64": base64.b64encode(raw).decode(),
        "base64 urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "base64 bearer": base64.b64encode(b"Bearer " + raw).decode(),
        "base64 basic": base64.b64encode(b"someone:" + raw).decode(),
        "base64 urlsafe basic": base64.urlsafe_b64encode(b"u:" + raw).decode(),
    }


def leaked(text: str, key: str) -> list[str]:
    """The names of the encodings of `key` (or of its 10-char head or tail) found in `text`."""
    found = [name for name, form in encodings(key).items() if form in text]
    found += [name for name, part in (("head", key[:10]), ("tail", key[-10:])) if part in text]
    return found


@pytest.mark.parametrize("name", sorted(encodings(KEY)))
def test_every_encoding_is_masked(name: str) -> None:
    scrub.register_secret(KEY)
    form = encodings(KEY)[name]
    out = scrub.scrub(f"error: {form} (sent)")
    assert leaked(out, KEY) == []
    assert out.startswith("error: ") and out.endswith(" (sent)")
    assert scrub.MASK in out


@pytest.mark.parametrize("name", sorted(encodings(KEY)))
def test_a_json_document_stays_valid_and_clean(name: str) -> None:
    scrub.register_secret(KEY)
    form = encodings(KEY)[name]
    document = json.dumps({"body": f"echo {form}!", "nested": [{"h": form}]}, indent=2)
    out = scrub.scrub_json(document)
    decoded = json.loads(out)  # still valid JSON
    assert leaked(json.dumps(decoded, ensure_ascii=False), KEY) == []
    assert leaked(out, KEY) == []
    assert decoded["body"].startswith("echo ") and decoded["body"].endswith("!")


def test_a_json_document_escaping_an_already_escaped_key() -> None:
    scrub.register_secret(KEY)
    once = "".join(f"\\u{ord(c):04x}" for c in KEY)
    body = '{"message": "' + once + '"}'  # the server wrote the key as \\u escapes
    assert json.loads(body)["message"] == KEY
    line = json.dumps({"body_excerpt": body})
    out = scrub.scrub_json(line)
    assert json.loads(json.loads(out)["body_excerpt"])["message"] == scrub.MASK


def test_truncated_keys_are_masked_from_ten_characters_after_the_prefix() -> None:
    scrub.register_secret(KEY)
    prefix = len("sk-proj-")  # a vendor prefix is public: ten random characters after it
    for cut in (prefix + 10, prefix + 11, 25, len(KEY) - 1):
        out = scrub.scrub(f'"body": "bad key {KEY[:cut]}"')
        assert out == '"body": "bad key ***"', cut
    assert scrub.scrub(f"x {KEY[:9]}") == f"x {KEY[:9]}"  # the public prefix and one more
    plain = "AGENTS: KEY-shaped? No"
    scrub.register_secret("AGENTS-KEY-1234567")  # no vendor prefix: ten characters
    assert scrub.scrub("x AGENTS-KEY") == "x ***" and scrub.scrub(plain) == plain


def test_no_secret_and_short_placeholders_leave_text_alone() -> None:
    text = "EMPTY key x, none, 1234567 — and 'sk-' itself"
    assert scrub.scrub(text) == text
    for placeholder in ("EMPTY", "none", "x", "1234567"):
        scrub.register_secret(placeholder)
    assert scrub.registered_secrets() == ()
    assert scrub.scrub(text) == text


def test_several_secrets() -> None:
    other = "sk-ant-api03-OTHERkeyABCDEFGHIJKLMNOP"
    scrub.register_secret(KEY)
    scrub.register_secret(other)
    out = scrub.scrub(f"{other} and {base64.b64encode(KEY.encode()).decode()}")
    assert leaked(out, KEY) == [] and leaked(out, other) == []


@settings(max_examples=40, deadline=None)
@given(
    key=st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="*"),
        min_size=10,
        max_size=60,
    ),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_any_printable_key_in_any_encoding(key: str, before: str, after: str) -> None:
    scrub._secrets, scrub._plain, scrub._json = (), None, None
    scrub.register_secret(key)
    for name, form in encodings(key).items():
        out = scrub.scrub(before + form + after)
        assert key not in out and form not in out, name
        document = scrub.scrub_json(json.dumps({"v": before + form + after}))
        value = json.loads(document)["v"]
        assert key not in value and form not in value, name


def test_strip_controls_keeps_layout_and_drops_terminal_commands() -> None:
    hostile = (
        "a\x1b[2Jb\x1b]0;title\x07c\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\d"
        "\x9b2Je\x9d0;t\x9cf\x08g\rh\x00i\x7fj\u202ek\x1bPq\x1b\\l\x1b7m\n\tn"
    )
    out = scrub.strip_controls(hostile)
    assert out == "abclinkdefghijklm\n\tn"
    assert scrub.for_people(f"{KEY}\x1b[0m") == f"{KEY}"  # nothing registered yet
    scrub.register_secret(KEY)
    assert scrub.for_people(f"k={KEY[:20]}\x1b[1m{KEY[20:]}") == "k=***"


def test_safe_console_styles_but_strips_and_masks() -> None:
    scrub.register_secret(KEY)
    out = io.StringIO()
    console = SafeConsole(file=out, width=40, force_terminal=True, color_system="standard")
    console.print(f"[bold]error:[/] HTTP 401 {KEY} \x1b[2J\x1b]0;owned\x07 done")
    table = Table("id", "error")
    table.add_row("p", f"bad {KEY}\x1b]8;;http://x\x1b\\")
    console.print(table)
    console.print(Text(f"folded over lines: {KEY}{KEY}", style="red"))
    text = out.getvalue()
    assert "\x1b[1m" in text  # its own styling stays
    assert "\x1b[2J" not in text and "owned" not in text and "\x1b]" not in text
    assert leaked(text.replace("\n", ""), KEY) == []


def test_scrubbed_stream_and_frame() -> None:
    scrub.register_secret(KEY)
    target = io.StringIO()
    stream = scrub.ScrubbedStream(target, controls=True)  # type: ignore[arg-type]
    stream.write(f"Traceback: ValueError: {KEY}\x1b[2J\n")
    assert target.getvalue() == "Traceback: ValueError: ***\n"
    frame = pd.DataFrame({"error": [f"bad {KEY}", None], "n": [1, 2]})
    scrub.scrub_frame(frame)
    assert frame["error"][0] == "bad ***" and pd.isna(frame["error"][1])
    assert list(frame["n"]) == [1, 2]


# --- keys where they are read ------------------------------------------------------------


def settings_for(kind: str, env: str) -> object:
    cls = provider_class(kind)
    data = {"id": "p", "kind": kind, "model": "m", "api_key_env": env}
    if kind in ("openai_compatible", "llamacpp"):
        data["base_url"] = "http://127.0.0.1:9/v1"
    return cls.settings_model.model_validate(data)


@pytest.mark.parametrize("ending", ["\r", "\r\n", "\n", "  ", "\t"])
def test_key_is_stripped_and_registered(monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    monkeypatch.setenv("LABKIT_T_KEY", f" {KEY}{ending}")
    settings = settings_for("openai", "LABKIT_T_KEY")
    assert settings.resolve_api_key() == KEY  # type: ignore[attr-defined]
    assert scrub.registered_secrets() == (KEY,)


@pytest.mark.parametrize("kind", sorted(set(provider_kinds()) - {"fake"}))
def test_unset_key_variable_skips_every_kind(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.delenv("LABKIT_T_UNSET", raising=False)
    settings = settings_for(kind, "LABKIT_T_UNSET")
    with pytest.raises(ProviderUnavailable, match="set LABKIT_T_UNSET to run it"):
        settings.check_available()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "bad", ["sk-abc\x01defghijklmnop", "sk-clé-0123456789abc", "sk-a\nb-0123456789"]
)
def test_key_that_is_no_header_value_is_refused_unquoted(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("LABKIT_T_KEY", bad)
    settings = settings_for("openai_compatible", "LABKIT_T_KEY")
    with pytest.raises(ProviderUnavailable) as caught:
        settings.check_available()  # type: ignore[attr-defined]
    message = str(caught.value)
    assert "LABKIT_T_KEY" in message and "skipping provider 'p'" in message
    assert "0123456789" not in message and "\n" not in message
    assert bad.strip() in scrub.registered_secrets()  # still masked wherever it shows


REAL_NAMES = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "VLLM_KEY",
    "AZURE_OPENAI_API_KEY_2",
    "my_key",
    "MyServiceKey",
    "KEY2024",
    "LABKIT_OPENAI_COMPAT_KEY",
    "HF_TOKEN",
]
KEY_SHAPED = [
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "abcdef0123456789abcdef0123456789",
    "Abc123Def456Ghi",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz",
    "x" * 70,
    "AIzaSyA1234567890abcdefgHIJKLmnopQRS",
    "gsk_0123abcd",
]


def test_looks_like_key() -> None:
    assert [n for n in REAL_NAMES if looks_like_key(n)] == []
    assert [k for k in KEY_SHAPED if not looks_like_key(k)] == []


@pytest.mark.parametrize("value", [*KEY_SHAPED, "sk-proj-abc", "12345"])
def test_key_shaped_api_key_env_is_refused_without_echo(value: str) -> None:
    entry = {"id": "p", "kind": "openai_compatible", "model": "m", "base_url": "http://h/v1"}
    data = {
        "name": "t",
        "providers": [{**entry, "api_key_env": value}, {**entry, "id": "q", "api_key_env": 12345}],
        "experiments": [{"kind": "single", "prompts": ["hi"]}],
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "c.yaml")
    message = str(caught.value)
    assert "providers[0].api_key_env" in message and "providers[1].api_key_env" in message
    assert value not in message and "12345" not in message


# --- proxies -----------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "[::1]", "localhost", "LOCALHOST."])
def test_loopback_never_goes_through_a_proxy(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert is_loopback(host.strip("[]").rstrip("."))
    assert proxy_for(f"http://{host}:8000/v1") is None
    assert proxy_for(f"https://{host}/v1") is None


def test_remote_target_names_its_proxy_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("ALL_PROXY", "socks5://user:hunter2pass@10.1.2.3:1080")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    choice = proxy_for("https://api.example.com/v1")
    assert choice is not None
    assert choice.describe() == "proxy socks5://10.1.2.3:1080 (from ALL_PROXY)"
    assert proxy_for("https://internal.example/v1") is None


def _provider_with(monkeypatch: pytest.MonkeyPatch, proxy: str) -> Callable[[], object]:
    monkeypatch.setenv("ALL_PROXY", proxy)
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {"id": "p", "kind": "openai_compatible", "model": "m", "base_url": "http://remote.test/v1"}
    )
    return lambda: cls(settings)


@pytest.mark.parametrize(
    ("proxy", "needs"),
    [("socks5://me:hunter2pass@127.0.0.1:1080", "httpx[socks]"), ("ftp://127.0.0.1:21", "scheme")],
)
def test_unusable_proxy_is_one_clear_message(
    monkeypatch: pytest.MonkeyPatch, proxy: str, needs: str
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    build = _provider_with(monkeypatch, proxy)
    with pytest.raises(ProviderUnavailable) as caught:
        build()
    message = str(caught.value)
    assert "provider 'p'" in message and "(from ALL_PROXY)" in message and needs in message
    assert "hunter2pass" not in message and "\n" not in message


def test_a_guarded_process_prints_no_key_in_a_traceback() -> None:
    # A child process (no socket): the CLI and the workers guard their streams like this.
    code = (
        "from labkit.scrub import guard_std_streams, register_secret\n"
        "guard_std_streams()\n"
        f"register_secret({KEY!r})\n"
        f"print('out', {KEY!r})\n"
        f"raise ValueError('bad key ' + {KEY!r} + '\\x1b[2J\\x1b]0;owned\\x07')\n"
    )
    root = str(Path(__file__).resolve().parents[1])  # this tree's labkit, not an installed one
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 1
    assert done.stdout == "out ***\n"
    assert "ValueError: bad key ***" in done.stderr
    assert leaked(done.stderr, KEY) == [] and "\x1b" not in done.stderr
