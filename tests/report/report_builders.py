"""Synthetic run folders for the report tests: `RequestRecord`s → records.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labkit.figures import (
    AttributionFigures,
    AttributionKey,
    AttributionRow,
    CacheEffect,
    ConversationFigures,
    ConversationTurn,
    DeterminismFigures,
    Figures,
    LinearFit,
    LoadFigures,
    LoadLevel,
    LoadLevelCache,
    Mean,
    PrefillDecodeFigures,
    PrefillPoint,
    Quantile,
    RequestTimeline,
    SingleFigures,
    SLOReport,
    SweepFigures,
    SweepProbe,
    TokenizerCount,
    TokenPieces,
    TokenRatioFigures,
    TokenRatioRow,
    TTFTSplit,
    VariantRow,
)
from labkit.records import LabAnswer, LabResults, RequestRecord
from labkit.server_metrics import ServerMetricsSample, metrics_file_name
from tests.support.records import make_record


def write_run(
    run_dir: Path,
    records: list[RequestRecord],
    *,
    manifest: dict[str, Any] | None = None,
    lab: LabResults | None = None,
    tail: str = "",
) -> Path:
    """Write a run folder; `tail` is appended raw (e.g. a truncated line)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "records.jsonl").open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(rec.to_json_line() + "\n")
        fh.write(tail)
    man: dict[str, Any] = {
        "run_id": records[0].run_id if records else run_dir.name,
        "name": run_dir.name,
        "status": "completed",
        "records": len(records),
        "providers": {},
    }
    man.update(manifest or {})
    (run_dir / "manifest.json").write_text(json.dumps(man), encoding="utf-8")
    if lab is not None:
        (run_dir / "lab.json").write_text(lab.model_dump_json(), encoding="utf-8")
    return run_dir


def full_lab(run_id: str = "run-1") -> LabResults:
    """A lab.json with the five answers and the figures the plots read."""

    def ans(exp: str, provider: str, text: str, figures: Figures | None) -> LabAnswer:
        return LabAnswer(
            experiment=exp,
            provider=provider,
            model="m",
            question=f"What does {exp} show?",
            answer=text,
            figures=figures,
        )

    def ratio_row(text_id: str, chars: int, tiktoken: int | None) -> TokenRatioRow:
        return TokenRatioRow(
            text_id=text_id,
            chars=chars,
            bytes=chars,
            tokens=100,
            token_source="provider",
            chars_per_token=chars / 100,
            rule_of_4_estimate=chars / 4,
            rule_of_4_error_pct=(chars / 4 - 100),
            tiktoken_tokens=tiktoken,
        )

    return LabResults(
        run_id=run_id,
        answers=[
            ans(
                "single",
                "local",
                "TTFT was 100 ms; decode 10 ms/token.",
                SingleFigures(n=3, failed=0, ttft_ms_p50=100.0),
            ),
            ans(
                "token_ratio",
                "local",
                "English prose ran 4.2 characters per token.",
                TokenRatioFigures(rows=[ratio_row("prose", 420, 98), ratio_row("code", 300, None)]),
            ),
            ans("determinism", "local", "5 of 5 seeded runs gave the same text.", None),
            ans(
                "prefill_decode",
                "local",
                "Prefill costs 0.2 ms per prompt token.",
                PrefillDecodeFigures(
                    points=[
                        PrefillPoint(
                            target_prompt_tokens=t,
                            input_tokens=t,
                            ttft_ms=20 + 0.2 * t,
                            prefill_ms=0.2 * t,
                            decode_ms_per_token=10.0,
                            cached_tokens=0,
                        )
                        for t in (128, 256, 512, 1024)
                    ],
                    fit=LinearFit(ms_per_token=0.2, intercept_ms=20.0, r2=1.0, n=4),
                ),
            ),
            ans("attribution", "local", "Network and front end add 5 ms to TTFT.", None),
        ],
    )


def mixed_records(run_id: str = "run-1") -> list[RequestRecord]:
    """Two providers (one reports its own timings, one does not), errors, warm-ups."""
    recs: list[RequestRecord] = []
    for i in range(20):
        recs.append(
            make_record(
                run_id=run_id,
                ttft_ms=100.0 + i,
                prefill_ms=90.0 + i,
                provider_decode_ms_per_token=9.0,
            )
        )
        recs.append(
            make_record(
                run_id=run_id,
                provider="hosted",
                provider_kind="anthropic",
                ttft_ms=300.0 + i,
                decode_ms_per_token=20.0,
            )
        )
    for t in (128, 256, 512, 1024):
        recs.append(
            make_record(
                run_id=run_id,
                experiment="prefill_decode",
                input_tokens=t,
                ttft_ms=20 + 0.2 * t,
                prefill_ms=0.2 * t,
                tags={"target_prompt_tokens": t},
            )
        )
    recs.append(make_record(run_id=run_id, warmup=True, ttft_ms=5000.0))
    recs.append(
        make_record(
            run_id=run_id,
            provider="hosted",
            provider_kind="anthropic",
            error_kind="timeout",
            ttft_ms=9999.0,
        )
    )
    return recs


def _attribution(prefill: float | None, gap: float | None) -> AttributionFigures:
    values = {
        AttributionKey.PREFILL: prefill,
        AttributionKey.TTFT_MINUS_PREFILL: gap,
        AttributionKey.REQUEST_PREPARATION: 0.3,
        AttributionKey.STREAM_PARSING: 0.6,
    }
    rows = [
        AttributionRow(
            key=key,
            measurement=key.value,
            owner="someone",
            value_ms=value,
            source="test",
            note=None if value is not None else "not reported by this provider",
        )
        for key, value in values.items()
    ]
    ttft = (prefill or 0) + (gap or 300)

    def mean(value: float) -> Mean:
        return Mean(value=value, lo=value - 1, hi=value + 1, n=4)

    split = (
        TTFTSplit(
            ttft_ms=mean(ttft),
            provider_queue_ms=Mean(value=0.0, lo=0.0, hi=0.0, n=4),
            queue_source="idle",
            provider_prefill_ms=mean(prefill),
            network_front_end_ms=mean(gap) if gap is not None else None,
            unsplit_ms=None if gap is not None else mean(ttft - prefill),
        )
        if prefill is not None
        else TTFTSplit(
            ttft_ms=mean(ttft),
            unsplit_ms=mean(ttft),
            not_derived=[
                "labkit's own send was not observed (a transport without trace events): it "
                "is inside network and front end",
                "the provider reports no queue time",
                "the provider reports no prefill time",
            ],
        )
    )
    return AttributionFigures(
        rows=rows,
        ttft_ms_p50=ttft,
        n=4,
        ttft_split=split,
        prepare_ms=Quantile(q=0.5, value=0.3, n=4, min_n=6),
        parse_ms=Quantile(q=0.5, value=0.6, n=4, min_n=6),
    )


def picture_lab(run_id: str = "run-1") -> LabResults:
    """A lab.json whose five answers carry everything the five pictures draw, for two
    providers (`local` reports its own timings, `hosted` does not)."""

    def ans(exp: str, provider: str, text: str, figures: Figures) -> LabAnswer:
        return LabAnswer(
            experiment=exp,
            provider=provider,
            model="m",
            question=f"What does {exp} show?",
            answer=text,
            figures=figures,
        )

    def timeline(ttft: float, step: float, prefill: float | None) -> RequestTimeline:
        offsets = [ttft + step * i for i in range(32)]
        return RequestTimeline(
            record_id="r",
            headers_ms=ttft / 2,
            first_event_ms=ttft,
            ttft_ms=ttft,
            last_token_ms=offsets[-1],
            e2e_ms=offsets[-1] + 1,
            event_offsets_ms=offsets,
            provider_prefill_ms=prefill,
            provider_decode_ms=step * 31 if prefill is not None else None,
        )

    texts = {"english": "The quick brown fox jumps.", "japanese": "東京は日本の首都です。"}
    pieces = [
        TokenPieces(text_id="english", tokenizer=tok, pieces=["The", " quick", " brown", " fox"])
        for tok in ("tiktoken:o200k_base", "m [local]")
    ] + [TokenPieces(text_id="japanese", tokenizer="m [local]", pieces=list(texts["japanese"]))]
    counts = [
        TokenizerCount(text_id=t, tokenizer=tok, tokens=n, chars_per_token=len(texts[t]) / n)
        for t, tok, n in (
            ("english", "tiktoken:o200k_base", 6),
            ("english", "m [local]", 7),
            ("japanese", "tiktoken:o200k_base", 5),
            ("japanese", "m [local]", 11),
        )
    ]
    words = ["Once", " upon", " a", " time", ",", " a", " keeper", " lit", " the", " lamp"]
    variants = [
        VariantRow(
            variant="t0",
            params={"temperature": 0},
            n=2,
            identical=True,
            distinct_outputs=1,
            outputs=[words, words],
        ),
        VariantRow(
            variant="t1",
            params={"temperature": 1.0},
            n=2,
            identical=False,
            distinct_outputs=2,
            first_divergent_token=3,
            outputs=[words, [*words[:3], " day", " the", " sea", " rose"]],
        ),
    ]
    points = [
        PrefillPoint(
            target_prompt_tokens=t,
            input_tokens=t,
            ttft_ms=20 + 0.2 * t,
            decode_ms_per_token=10.0 + t / 1000,
            n=2,
        )
        for t in (16, 128, 256, 512)
    ]
    answers: list[LabAnswer] = []
    for provider, prefill in (("local", 12.0), ("hosted", None)):
        answers += [
            ans(
                "single",
                provider,
                "TTFT 20 ms: the first token came after 20 ms.",
                SingleFigures(
                    n=6,
                    failed=0,
                    ttft_ms_p50=20.0,
                    timeline=timeline(20.0 if prefill else 300.0, 11.0, prefill),
                ),
            ),
            ans(
                "token_ratio",
                provider,
                "4.33 characters per token for english.",
                TokenRatioFigures(side_by_side=counts, pieces=pieces),
            ),
            ans(
                "determinism",
                provider,
                "1 of 2 settings gave identical replies.",
                DeterminismFigures(variants=variants, tokenizer="m"),
            ),
            ans(
                "prefill_decode",
                provider,
                "0.200 ms per prompt token.",
                PrefillDecodeFigures(
                    points=points,
                    fit=LinearFit(ms_per_token=0.2, intercept_ms=20.0, r2=1.0, n=8),
                    cache=CacheEffect(
                        prefix_tokens=256,
                        prime_ttft_ms=71.2,
                        hit_ttft_ms=25.0,
                        hit_input_tokens=270,
                        n_hits=2,
                    ),
                ),
            ),
            ans(
                "attribution",
                provider,
                "68% of the wait for the first token was the server's.",
                _attribution(prefill, 5.0 if prefill else None),
            ),
        ]
    return LabResults(run_id=run_id, answers=answers)


def section_answers(provider: str = "local") -> list[LabAnswer]:
    """Load (with cache counts and SLOs), sweep and conversation answers: what the report's
    section pictures (load curves, cache hits, goodput, conversation turns) draw."""

    def level(target: int, ttft: float, passed: bool) -> LoadLevel:
        return LoadLevel(
            level=f"c{target}",
            title=f"concurrency {target}",
            mode="concurrency",
            target=target,
            requests=8,
            ok=8,
            completed_rps=2.0 * target,
            output_tokens_per_s=30.0 * target,
            ttft_ms_p50=ttft,
            ttft_ms_p99=2 * ttft,
            client_bound=target == 8,
            slo=SLOReport(
                requests=8,
                good=8 if passed else 2,
                goodput_rps=2.0 * target if passed else 0.0,
                passed=passed,
            ),
            cache=LoadLevelCache(
                counted=8,
                hits=4,
                cached_share=0.5,
                ttft_ms_p50_hit=ttft / 2,
                ttft_ms_p50_miss=ttft * 1.5,
            ),
        )

    levels = [
        level(1, 40.0, True),
        level(2, 45.0, True),
        level(4, 60.0, True),
        level(8, 200.0, False),
    ]
    probes = [
        SweepProbe(step=i, role="baseline" if i == 0 else "bisect", level=lv, met=lv.slo.passed)
        for i, lv in enumerate(levels)
        if lv.slo is not None
    ]
    turns = [
        ConversationTurn(
            cache=cache,
            turn=t,
            ok=2,
            input_tokens_p50=100.0 + 80 * t,
            cached_tokens_p50=80.0 * t if cache == "on" else 0.0,
            ttft_ms_p50=50.0 if cache == "on" else 50.0 + 40 * t,
        )
        for cache in ("on", "off")
        for t in range(3)
    ]

    def ans(exp: str, figures: Figures) -> LabAnswer:
        return LabAnswer(
            experiment=exp,
            provider=provider,
            question=f"What does {exp} show?",
            answer="See the chart.",
            figures=figures,
        )

    return [
        ans("load", LoadFigures(levels=levels, mode="concurrency")),
        ans(
            "sweep",
            SweepFigures(
                mode="concurrency",
                probes=probes,
                knee=4,
                knee_low=4,
                knee_high=8,
                knee_goodput_rps=8.0,
            ),
        ),
        ans("conversation", ConversationFigures(turns=turns)),
    ]


def write_scrapes(run_dir: Path, provider: str = "local", n: int = 12) -> None:
    """A server's /metrics scrapes (running and waiting requests) beside the records."""
    lines = [
        ServerMetricsSample(
            provider=provider,
            t_mono_ns=10**12 + i * 500_000_000,
            at="2025-01-01T00:00:00Z",
            scrape_ms=1.0,
            running=min(i, 4),
            waiting=max(0, i - 4),
        ).model_dump_json()
        for i in range(n)
    ]
    (run_dir / metrics_file_name(provider)).write_text("\n".join(lines) + "\n", encoding="utf-8")
