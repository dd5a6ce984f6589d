"""`labkit run` end to end with names that start like keys: provider ids
`xai-grok-4-fast-reasoning-stream` and `hf-novita-sla-metrics-replay` measure and record, named
as written in every output, while the xAI-format key they send (echoed back by the server in
every encoding) reaches no output; the same key written into the config is refused unshown."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

from tests.test_scrub import leaked
from tests.test_scrub_server import EchoServer, config, outputs, run, server

pytestmark = pytest.mark.integration

__all__ = ["server"]  # the fixture, used by name

#: An xAI-format key (`xai-` + 80 letters and digits), from a seeded generator.
_RNG = random.Random(44)
KEY = "xai-" + "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(80))
IDS = ("xai-grok-4-fast-reasoning-stream", "hf-novita-sla-metrics-replay")


def test_providers_named_like_keys_run_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer
) -> None:
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY)
    text = config(server.base_url, dict.fromkeys(IDS, "echo-stream"))
    text = text.replace("name: echo", f"name: {IDS[0]}")
    result, folder = run(tmp_path, text)
    assert result.exit_code == 0 and folder is not None, result.output
    assert server.keys == [KEY, KEY]
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert sorted(r["provider"] for r in records) == sorted(IDS)
    assert all(r["error"] is None and r["output_text"] for r in records)
    texts = outputs(result, folder)
    for where, out in texts.items():
        assert leaked(out, KEY) == [], f"key leaked into {where}"
    summary = next(t for p, t in texts.items() if p.endswith("summary.txt"))
    assert all(pid in summary for pid in IDS)


def test_the_key_itself_as_a_provider_id_is_refused_unshown(
    tmp_path: Path, server: EchoServer
) -> None:
    result, folder = run(tmp_path, config(server.base_url, {KEY: "echo-stream"}))
    assert result.exit_code == 1 and folder is None
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "providers[0].id: holds what looks like a key" in result.stderr
    assert KEY[4:14] not in result.output
    assert server.keys == []
