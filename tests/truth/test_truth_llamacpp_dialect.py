"""llama.cpp's dialect on the fake server: the endpoints labkit's llamacpp provider calls
(``/health``, ``/props``, ``/tokenize`` with pieces, ``/metrics``) plus ``/detokenize``,
``/apply-template`` and ``/slots``; the template's tokens are the ones a chat request's usage
counts, as the truth log has them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

TEXT = "Explain what a token is, in one sentence: 日本."


def test_the_llamacpp_client_reads_the_fake_server_s_endpoints(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"

    async def go() -> int:
        with TruthServer(
            truth_log=log, chat_template=True, slots=2, tokens=3, server_timings="llamacpp"
        ) as srv:
            root = f"http://127.0.0.1:{srv.port}"
            provider = make_provider("llamacpp", base_url=root, managed=False)
            try:
                described = await provider.describe()
                assert described["build_info"] == provider.server_build
                assert "truth" in (provider.server_build or "")
                assert described["total_slots"] == 2 and described["n_ctx"] > 0
                cut = await provider.tokenized(TEXT)
                assert cut is not None and cut.pieces is not None
                assert b"".join(cut.pieces).decode() == TEXT
                ids = await provider.tokenize(TEXT)
                assert list(cut.ids) == ids
                async with httpx.AsyncClient(base_url=root) as http:
                    back = await http.post("/detokenize", json={"tokens": ids})
                    assert back.json() == {"content": TEXT}
                    assert (await http.get("/health")).json() == {"status": "ok"}
                    slots = (await http.get("/slots")).json()
                    assert [s["id"] for s in slots] == [0, 1]
                    metrics = (await http.get(provider.metrics_url() or "")).text
                    assert "llamacpp:requests_processing 0" in metrics
                    messages = [{"role": "user", "content": TEXT}]
                    framed = await http.post("/apply-template", json={"messages": messages})
                    prompt = framed.json()["prompt"]
                    counted = await http.post("/tokenize", json={"content": prompt})
                ctx = RecordContext(run_id="r", experiment="t")
                rec = await StreamRecorder().record(provider, chat(TEXT), ctx)
                assert rec.error is None
                # What the API counted for the text sent as a chat message: the template's
                assert rec.usage.input_tokens == len(counted.json()["tokens"])
                # 3 special tokens, "user", "\n" before the last and "assistant", "\n" after
                assert rec.usage.input_tokens == len(ids) + 7
                # The provider's own count of the chat prompt, nothing generated, says the same.
                whole = await provider.count_chat_prompt(messages)
                assert whole is not None and whole.tokens == rec.usage.input_tokens
                return rec.usage.input_tokens
            finally:
                await provider.aclose()

    counted = asyncio.run(go())
    (truth,) = read_truth_log(log).requests
    assert truth.prompt_tokens == counted


def test_apply_template_shows_the_chatml_frame_or_the_plain_texts(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Say hi."}]
    with TruthServer(truth_log=tmp_path / "t.jsonl", chat_template=True) as srv:
        root = f"http://127.0.0.1:{srv.port}"
        framed = httpx.post(f"{root}/apply-template", json={"messages": messages})
        # a path segment sets the request's own schedule, on these endpoints too
        plain = httpx.post(
            f"{root}/chat_template=false/apply-template", json={"messages": messages}
        )
    assert framed.json() == {
        "prompt": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nSay hi.<|im_end|>\n"
        "<|im_start|>assistant\n"
    }
    assert plain.json() == {"prompt": "S\nSay hi."}
