"""Each experiment's computation on synthetic records with known answers."""

from __future__ import annotations

import asyncio

import pytest

from labkit.analysis.selection import measured
from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.experiments.determinism import (
    DeterminismExperiment,
    DeterminismSettings,
    common_prefix_length,
    first_divergence,
)
from labkit.experiments.prefill_decode import PrefillDecodeExperiment, PrefillDecodeSettings
from labkit.experiments.single import SingleExperiment, SingleSettings
from labkit.experiments.token_ratio import (
    TokenRatioExperiment,
    TokenRatioSettings,
    whole_characters,
)
from labkit.figures import AttributionKey, LinearFit, NextTokenFigures
from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.figures.next_token import Divergence, NextTokenStep, NextTokenVariant, TokenChoice
from labkit.providers.base import TokenCount
from labkit.records import RequestRecord
from labkit.tokenizers import offline_tokenizer
from labkit.wording.determinism import determinism_answer
from labkit.wording.prefill_decode import prompt_cost_lead, prompt_cost_model_sentence
from tests.providers.streams import make_provider
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def test_least_squares_recovers_a_planted_line() -> None:
    xs = [16.0, 64.0, 256.0, 1024.0, 2048.0]
    ys = [0.75 * x + 12.0 for x in xs]
    fit = LinearFit.least_squares(xs, ys)
    assert fit is not None and fit.n == 5
    assert fit.ms_per_token == pytest.approx(0.75)
    assert fit.intercept_ms == pytest.approx(12.0)
    assert fit.r2 == pytest.approx(1.0)
    assert LinearFit.least_squares([5.0, 5.0], [1.0, 2.0]) is None  # one distinct x: no line


def test_prefill_decode_fit_from_records() -> None:
    exp = PrefillDecodeExperiment(PrefillDecodeSettings(prompt_tokens=[16, 256, 1024]))
    recs = []
    for n in (16, 256, 1024):
        for _ in range(3):
            recs.append(
                make_record(
                    experiment="prefill_decode",
                    ttft_ms=0.5 * n + 20.0,
                    prefill_ms=0.45 * n + 2.0,
                    decode_ms_per_token=9.0,
                    input_tokens=n,
                    tags={"variant": "cold", "target_prompt_tokens": n},
                )
            )
    recs.append(make_record(experiment="prefill_decode", ttft_ms=1.0, warmup=True))
    recs.append(
        make_record(
            experiment="prefill_decode",
            ttft_ms=None,
            error_kind="http_status",
            tags={"variant": "cold", "target_prompt_tokens": 16},
        )
    )
    recs += [
        make_record(
            experiment="prefill_decode",
            ttft_ms=530.0,
            input_tokens=1030,
            cached_tokens=0,
            tags={"variant": "cache", "phase": "prime", "target_prompt_tokens": 1024},
        ),
        make_record(
            experiment="prefill_decode",
            ttft_ms=40.0,
            input_tokens=1030,
            cached_tokens=1020,
            tags={"variant": "cache", "phase": "hit", "target_prompt_tokens": 1024},
        ),
    ]
    answer = exp.analyze("p", "m", recs)
    f = answer.figures
    assert f.fit.ms_per_token == pytest.approx(0.5)
    assert f.fit.intercept_ms == pytest.approx(20.0)
    assert f.fit.n == 9  # warm-up and failed request excluded
    assert f.server_prefill_fit.ms_per_token == pytest.approx(0.45)
    assert [p.input_tokens for p in f.points] == [16, 256, 1024]
    assert f.decode_fit.ms_per_token == pytest.approx(0.0)
    assert f.cache.hit_cached_tokens == 1020
    assert f.cold_cache_hits == 0
    # An exact line: no curve to test, a fixed part whose interval lies above 0.
    m = f.ttft_model
    assert m is not None and m.model == "linear" and m.curvature_p is None and m.n == 9
    assert m.marginal_at_min.value == pytest.approx(0.5)
    assert m.intercept_reading == "positive"
    assert f.server_prefill_model is not None
    assert f.server_prefill_model.ms_per_token.value == pytest.approx(0.45)
    # The lesson leads: a prompt token's cost against a generated token's, with intervals
    assert answer.answer.startswith(
        "0.5 ms (95% CI 0.5 to 0.5) more to the first token for each prompt token read, "
    )
    assert f.prompt_token_ms is not None and f.prompt_token_ms.value == pytest.approx(0.5)
    assert f.generated_vs_prompt is not None
    assert f.generated_token_ms is not None and f.generated_token_ms.value is not None
    assert f.generated_vs_prompt.value == pytest.approx(f.generated_token_ms.value / 0.5)
    assert "F-test" not in answer.answer and "fixed part" not in answer.answer
    # ... and the statistics behind the model are the report's
    assert prompt_cost_lead(m).startswith(
        "0.5 ms (95% CI 0.5 to 0.5) more to the first token per extra prompt token, over "
        "16–1,024 tokens"
    )
    assert "fixed part 20 ms" in prompt_cost_model_sentence(m)
    assert "TTFT went from 530.0 ms (once, cold) to 40.0 ms (median of 1, 1020 tokens" in (
        answer.answer
    )


def test_prefill_decode_flags_a_cache_hit_in_the_cold_sweep() -> None:
    exp = PrefillDecodeExperiment(PrefillDecodeSettings(prompt_tokens=[16, 64]))
    recs = [
        make_record(
            experiment="prefill_decode",
            ttft_ms=10.0 + n,
            input_tokens=n,
            cached_tokens=c,
            tags={"variant": "cold", "target_prompt_tokens": n},
        )
        for n, c in ((16, 0), (64, 60), (64, 0))
    ]
    answer = exp.analyze("p", "m", recs)
    assert answer.figures.cold_cache_hits == 1
    assert "still hit a prompt cache" in answer.answer


def test_divergence_of_known_token_lists() -> None:
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_divergence([[1, 2, 3], [1, 2, 3]]) is None
    assert first_divergence([[1, 2, 3, 4], [1, 2, 3, 5], [1, 7]]) == 1
    assert first_divergence([[1, 2, 3], [1, 2, 3, 4]]) == 3  # a prefix diverges at its end


def test_determinism_names_the_controlling_parameter() -> None:
    exp = DeterminismExperiment(DeterminismSettings(repeats=2))
    recs = []
    outputs = {
        "t0": ["a b c", "a b c"],
        "t0-seed": ["a b c", "a b c"],
        "t1": ["a b c", "a x y"],
        "t1-seed": ["q r s", "q r s"],
    }
    for variant, texts in outputs.items():
        for t in texts:
            recs.append(
                make_record(experiment="determinism", output_text=t, tags={"variant": variant})
            )
    answer = exp.analyze("p", "m", recs)
    rows = {r.variant: r for r in answer.figures.variants}
    assert rows["t0"].identical is True
    assert rows["t1"].identical is False
    assert rows["t1"].first_divergent_token == 2  # character ruler: "a " shared
    assert rows["t1-seed"].identical is True
    assert "Above temperature 0 without a seed, replies varied." in answer.answer
    assert "A seed made sampled replies repeat." in answer.answer
    # Compared by characters (no tokenizer here), said 1-based: "a " shared, the 3rd differs.
    split = "The earliest split came at character 3 (temperature 1.0: 2 different replies of 2)."
    assert split in answer.answer


def test_determinism_says_where_the_replies_diverged_once() -> None:
    """With the candidates, the divergence sentence says where the replies split; the answer
    does not say it again from the compared outputs."""
    rows = [
        VariantRow(
            variant="t0", params={"temperature": 0}, n=2, identical=True, distinct_outputs=1
        ),
        VariantRow(
            variant="t1",
            params={"temperature": 1.0},
            n=2,
            identical=False,
            distinct_outputs=2,
            first_divergent_token=0,
        ),
    ]
    step = NextTokenStep(token="A", p=0.4, entropy_bits=1.5)
    seen = NextTokenFigures(
        top_k=2,
        inspected=True,
        variants=[
            NextTokenVariant(
                variant="t1",
                params={"temperature": 1.0},
                replies=[[step], [step.model_copy(update={"token": "B"})]],
                divergence=Divergence(
                    step=0,
                    prefix="",
                    taken=[TokenChoice(token="A", p=0.4), TokenChoice(token="B", p=0.35)],
                ),
            )
        ],
    )
    text = determinism_answer(
        DeterminismFigures(variants=rows, tokenizer="llamacpp:/tokenize", next_token=seen)
    )
    assert text.count("token 1") == 1 and "earliest split" not in text, text
    assert "diverged at token 1 (temperature 1.0: 2 different replies of 2)" in text, text
    without = determinism_answer(DeterminismFigures(variants=rows, tokenizer="llamacpp:/tokenize"))
    assert "The earliest split came at token 1 (temperature 1.0: 2 different replies of 2)." in (
        without
    )


def test_token_ratio_rows_and_rule_of_four() -> None:
    settings = TokenRatioSettings(
        texts=[{"id": "a", "text": "x" * 40}, {"id": "b", "text": "日本語" * 4}]
    )
    exp = TokenRatioExperiment(settings)
    exp._counts["p"] = {  # what prepare() would have stored from /tokenize
        "a": TokenCount(5, "llamacpp:/tokenize"),
        "b": TokenCount(12, "llamacpp:/tokenize"),
        "__baseline__": TokenCount(1, "llamacpp:/tokenize"),
    }
    recs = [
        make_record(experiment="token_ratio", prompt_id="__baseline__", input_tokens=8),
        make_record(experiment="token_ratio", prompt_id="a", input_tokens=12),
        make_record(experiment="token_ratio", prompt_id="b", input_tokens=19),
    ]
    answer = exp.analyze("p", "m", recs)
    rows = {r.text_id: r for r in answer.figures.rows}
    assert rows["a"].chars_per_token == pytest.approx(8.0)
    assert rows["a"].rule_of_4_error_pct == pytest.approx(100.0)  # 10 estimated vs 5 real
    assert rows["b"].bytes == 36
    assert rows["b"].chars_per_token == pytest.approx(1.0)
    assert rows["b"].rule_of_4_error_pct == pytest.approx(-75.0)
    assert rows["a"].usage_text_tokens == pytest.approx(5.0)  # 12 - 8 framing + 1
    assert "closest for b (-75%) and worst for a (+100%)" in answer.answer


def test_token_ratio_falls_back_to_usage_without_a_counter() -> None:
    exp = TokenRatioExperiment(TokenRatioSettings(texts=[{"id": "a", "text": "abcdefgh"}]))
    recs = [
        make_record(experiment="token_ratio", prompt_id="__baseline__", input_tokens=7),
        make_record(experiment="token_ratio", prompt_id="a", input_tokens=9),
    ]
    row = exp.analyze("p", "m", recs).figures.rows[0]
    assert row.tokens == 3 and row.token_source == "usage minus chat framing"


def test_attribution_derives_what_it_can_and_says_what_it_cannot() -> None:
    exp = AttributionExperiment(AttributionSettings())
    local = [
        make_record(
            experiment="attribution",
            provider_kind="fake",
            ttft_ms=150.0,
            prefill_ms=140.0,
            decode_ms_per_token=9.2,
            provider_decode_ms_per_token=9.0,
            headers_ms=2.0,
            connect_ms=0.3,
            tags={"connection": "fresh"},
        ),
        make_record(
            experiment="attribution",
            provider_kind="fake",
            ttft_ms=154.0,
            prefill_ms=146.0,
            decode_ms_per_token=9.4,
            provider_decode_ms_per_token=9.0,
            headers_ms=2.0,
            tags={"connection": "reused"},
        ),
    ]
    rows = {r.key: r for r in exp.analyze("p", "m", local).figures.rows}
    assert rows[AttributionKey.TTFT_MINUS_PREFILL].value_ms == pytest.approx(9.0)  # median of 10, 8
    assert rows[AttributionKey.DECODE_CLIENT_MINUS_PROVIDER].value_ms == pytest.approx(0.3)
    assert rows[AttributionKey.TCP_CONNECT].value_ms == pytest.approx(0.3)
    assert rows[AttributionKey.PREFILL].owner == "provider"

    hosted = [
        make_record(
            experiment="attribution",
            provider_kind="fake",
            ttft_ms=300.0,
            headers_ms=None,  # only a TTFT: nothing else can be derived
            first_event_ms=None,
            prepare_ms=None,
            parse_cpu_ms=None,
            tags={"connection": "fresh"},
        )
    ]
    answer = exp.analyze("h", "m", hosted)
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.PREFILL].value_ms is None
    assert rows[AttributionKey.PREFILL].note == "not reported by this provider"
    assert "cannot be separated" in rows[AttributionKey.TTFT_MINUS_PREFILL].note
    assert "the provider and the network together took" in answer.answer
    assert "no prefill time" in answer.answer and "no queue time" in answer.answer


def test_single_excludes_warmups_and_failures() -> None:
    exp = SingleExperiment(SingleSettings())
    recs = [make_record(experiment="single", ttft_ms=t) for t in (10.0, 20.0, 30.0)]
    recs += [
        make_record(experiment="single", ttft_ms=1.0, warmup=True),
        make_record(experiment="single", ttft_ms=None, error_kind="http_status"),
    ]
    answer = exp.analyze("p", "m", recs)
    assert answer.figures.ttft_ms_p50 == pytest.approx(20.0)
    assert answer.figures.n == 3 and answer.figures.failed == 1
    assert answer.status == "partial"
    assert len(measured(recs)) == 3


def test_failed_provider_answers_say_so() -> None:
    recs = [
        make_record(
            experiment="single", ttft_ms=None, error_kind="http_status", error_message="HTTP 500"
        )
    ]
    answer = SingleExperiment(SingleSettings()).analyze("p", "m", recs)
    assert answer.status == "failed" and "HTTP 500" in answer.answer


def test_prefill_decode_default_sweep_is_capped_to_the_context() -> None:
    from labkit.providers.llamacpp import LlamaCppSettings

    exp = PrefillDecodeExperiment(PrefillDecodeSettings())
    small = LlamaCppSettings(id="l", kind="llamacpp", ctx_size=1024)
    assert exp.lengths_for(small) == [16, 64, 256]
    exp.validate_for(small)  # the default always fits
    asyncio.run(asyncio.sleep(0))


def _cold(ttfts: dict[int, list[float]]) -> list[RequestRecord]:
    return [
        make_record(
            experiment="prefill_decode",
            ttft_ms=t,
            input_tokens=n,
            tags={"variant": "cold", "target_prompt_tokens": n},
        )
        for n, ts in ttfts.items()
        for t in ts
    ]


def test_prefill_decode_chooses_a_curve_when_prefill_is_superlinear() -> None:
    exp = PrefillDecodeExperiment(PrefillDecodeSettings(prompt_tokens=[100, 1000, 2000]))
    answer = exp.analyze("p", "m", _cold({n: [0.001 * n * n] * 2 for n in (100, 1000, 2000)}))
    seg = answer.figures.marginal_ms_per_token
    assert seg[0].ms_per_token == pytest.approx(1.1)  # (1000 - 10) / 900
    assert seg[1].ms_per_token == pytest.approx(3.0)  # (4000 - 1000) / 1000
    m = answer.figures.ttft_model
    assert m is not None and m.model == "quadratic"
    assert m.curvature_p is not None and m.curvature_p < 0.05
    # d(0.001 n²)/dn = 0.002 n: 0.2 ms at 100 tokens, 4 ms at 2,000.
    assert m.marginal_at_min.value == pytest.approx(0.2)
    assert m.marginal_at_max.value == pytest.approx(4.0)
    lead = prompt_cost_lead(m)
    assert lead.startswith("0.2 ms (95% CI 0.2 to 0.2) more to the first token per extra prompt")
    assert ", 4 ms (4 to 4) at 2,000" in lead and len(lead.split()) <= 35
    assert prompt_cost_model_sentence(m).startswith(
        "A straight line fits worse than a curve (F-test p = "
    )


def test_prefill_decode_never_states_a_negative_fixed_part_as_a_fact() -> None:
    exp = PrefillDecodeExperiment(PrefillDecodeSettings(prompt_tokens=[512, 1024]))
    # Two lengths on a steep stretch: the line through them meets 0 tokens at about -200 ms.
    answer = exp.analyze("p", "m", _cold({512: [99.0, 101.0], 1024: [399.0, 401.0]}))
    m = answer.figures.ttft_model
    assert m is not None and m.intercept_reading == "negative" and m.curvature_p is None
    assert "is not physical: a straight line is the wrong model over this range" in (
        prompt_cost_model_sentence(m)
    )
    # Noise around a line through the origin: the fixed part is said to be indistinct from 0.
    noisy = {n: [0.5 * n + 5, 0.5 * n - 5] for n in (16, 256, 512, 1024)}
    answer = exp.analyze("p", "m", _cold(noisy))
    m = answer.figures.ttft_model
    assert m is not None and m.model == "linear" and m.intercept_reading == "zero"
    sentence = prompt_cost_model_sentence(m)
    assert "A curve fits no better than the line (F-test p = 1.00, n = 8)" in sentence
    assert "no fixed part distinguishable from 0 (95% CI -7.84 to 7.84 ms)" in sentence


def test_single_keeps_the_median_requests_timeline_for_the_anatomy_picture() -> None:
    exp = SingleExperiment(SingleSettings())
    recs = [
        make_record(
            experiment="single",
            ttft_ms=t,
            prefill_ms=t - 5,
            event_offsets_ms=[t, t + 10, t + 20],
            headers_ms=t / 2,
        )
        for t in (50.0, 100.0, 400.0)
    ]
    answer = exp.analyze("p", "m", recs)
    timeline = answer.figures.timeline
    assert timeline is not None and timeline.record_id == recs[1].record_id
    assert timeline.event_offsets_ms == [100.0, 110.0, 120.0]
    assert timeline.provider_prefill_ms == 95.0 and timeline.headers_ms == 50.0
    assert answer.answer.startswith("100 ms (n=3; an interval needs 6) to the first token")


def test_determinism_keeps_each_repeats_tokens_for_the_alignment_picture() -> None:
    exp = DeterminismExperiment(DeterminismSettings(repeats=2, variants=[{"name": "t1"}]))
    recs = [
        make_record(experiment="determinism", output_text=t, tags={"variant": "t1"})
        for t in ("ab", "ax")
    ]
    row = exp.analyze("p", "m", recs).figures.variants[0]
    assert row.outputs == [["a", "b"], ["a", "x"]]  # the character ruler, in send order
    assert row.first_divergent_token == 1


def test_token_ratio_keeps_the_offline_tokenizers_pieces() -> None:
    exp = TokenRatioExperiment(
        TokenRatioSettings(texts=[{"id": "a", "text": "hello world"}], send=False)
    )
    provider = make_provider("fake", id="p", model="m")

    async def go() -> None:
        await exp.prepare(provider)
        await provider.aclose()

    asyncio.run(go())
    pieces = {p.tokenizer: p.pieces for p in exp.analyze("p", "m", []).figures.pieces}
    assert pieces["tiktoken:cl100k_base"] == ["hello", " world"]
    assert pieces["tiktoken:o200k_base"] == ["hello", " world"]


def test_a_character_split_across_tokens_is_shown_whole_with_its_token_count() -> None:
    cut = offline_tokenizer("cl100k_base").tokenize("🛳️ ok")
    assert cut.pieces is not None and len(cut.pieces) > 2  # the ship's bytes take tokens
    texts, counts = whole_characters(cut.pieces)
    assert "".join(texts) == "🛳️ ok" and texts[-1] == " ok"
    assert sum(counts) == cut.count and counts[-1] == 1 and max(counts) > 1
    assert whole_characters((b"a", b"\xff")) == (["a", "\\xff"], [1, 1])  # never valid
