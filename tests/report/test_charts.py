"""The five pictures: built from lab.json's figures alone, drawn by vl-convert, and absent
(with a sentence) when the run has nothing for them."""

from __future__ import annotations

import json

import pytest
import vl_convert

from labkit.figures.determinism import DeterminismFigures
from labkit.figures.next_token import NextTokenFigures, NextTokenStep, NextTokenVariant
from labkit.records import LabAnswer, LabResults
from labkit.report.charts import Chart, TokenSpans
from labkit.report.kinds import question_charts
from labkit.report.kinds.attribution import whose_time_chart
from labkit.report.kinds.determinism import determinism_chart
from labkit.report.kinds.next_token import tokens_chart
from labkit.report.kinds.prefill_decode import prefill_chart
from labkit.report.kinds.single import anatomy_chart
from labkit.report.kinds.token_ratio import chars_per_token_chart, token_spans
from labkit.report.render import ChartBlock, TokenSpansBlock, fmt_num, render_html
from tests.report.report_builders import picture_lab

pytestmark = pytest.mark.unit


def _values(chart: Chart) -> list[dict[str, object]]:
    values: list[dict[str, object]] = chart.spec["data"]["values"]
    return values


def test_every_picture_is_drawn_for_every_provider() -> None:
    lab = picture_lab()
    charts = [
        anatomy_chart(lab),
        chars_per_token_chart(lab),
        determinism_chart(lab),
        prefill_chart(lab),
        whose_time_chart(lab)[0],
    ]
    for chart in charts:
        assert chart is not None
        assert chart.png.startswith(b"\x89PNG")
        svg = vl_convert.vegalite_to_svg(chart.spec)
        assert svg.count("<path") > 5, chart.name
    anatomy, _, determinism, prefill, whose = charts
    assert anatomy is not None and determinism is not None and prefill is not None
    assert whose is not None
    for chart in (anatomy, determinism, prefill, whose):
        assert {v["provider"] for v in _values(chart)} == {"local", "hosted"}, chart.name


def test_anatomy_draws_each_token_and_the_servers_own_lane() -> None:
    chart = anatomy_chart(picture_lab())
    assert chart is not None
    local = [v for v in _values(chart) if v["provider"] == "local"]
    assert sum(1 for v in local if str(v["what"]).startswith("token ")) == 32
    prefill = next(v for v in local if v["what"] == "server prefill")
    assert prefill["t"] == pytest.approx(8.0) and prefill["t2"] == pytest.approx(20.0)
    hosted = {v["lane"] for v in _values(chart) if v["provider"] == "hosted"}
    assert hosted == {"hosted · client"}  # no timings of its own: no server lane


def test_determinism_marks_the_first_divergent_token_only_once() -> None:
    chart = determinism_chart(picture_lab())
    assert chart is not None
    second = [v for v in _values(chart) if v["row"] == "local · t1 · repeat 2"]
    assert [v["status"] for v in second] == [
        "same as the first reply",
        "same as the first reply",
        "same as the first reply",
        "first different token",
        "after it",
        "after it",
        "after it",
    ]
    assert second[3]["token"] == " day"
    assert [v["i"] for v in second] == [1, 2, 3, 4, 5, 6, 7]  # token 1 is the first
    greedy = [v for v in _values(chart) if str(v["row"]).startswith("local · t0")]
    assert {v["status"] for v in greedy} == {"same as the first reply"}


def test_chars_per_token_has_the_four_character_rule_and_every_tokenizer() -> None:
    chart = chars_per_token_chart(picture_lab())
    assert chart is not None
    assert {v["tokenizer"] for v in _values(chart)} == {"o200k_base", "m [local]"}
    assert chart.spec["layer"][1]["data"]["values"] == [{"rule": 4}]
    spans = token_spans(picture_lab())
    assert spans is not None
    assert ("o200k_base", "english", ["The", " quick", " brown", " fox"], [1, 1, 1, 1]) in (
        spans.rows
    )


def test_prefill_chart_has_the_fit_line_and_the_cache_hit() -> None:
    chart = prefill_chart(picture_lab())
    assert chart is not None
    values = [v for v in _values(chart) if v["provider"] == "local"]
    fit = [v for v in values if "fit_ms" in v]
    assert [(v["tokens"], v["fit_ms"]) for v in fit] == [(16, 23.2), (512, pytest.approx(122.4))]
    assert any(v["what"] == "cached prefix (hit)" and v["ttft_ms"] == 25.0 for v in values)


def test_whose_time_names_what_could_not_be_derived() -> None:
    chart, missing = whose_time_chart(picture_lab())
    assert chart is not None
    parts = {(v["provider"], v["part"]) for v in _values(chart)}
    assert ("local", "provider: prefill") in parts
    assert ("hosted", "provider + network, not separable") in parts
    assert ("hosted", "provider: prefill") not in parts
    assert ("local", "provider: queue") in parts  # 0 by construction, drawn all the same
    # labkit's work outside the clock is its own bar, never stacked on the TTFT
    outside = {v["part"] for v in _values(chart) if v["bar"] == "local: outside the clock"}
    assert outside == {
        "labkit: preparing the request (before the clock)",
        "labkit: parsing the stream (the whole stream)",
    }
    assert missing == [
        "hosted: not derived: labkit's own send was not observed (a transport without trace "
        "events): it is inside network and front end.",
        "hosted: not derived: the provider reports no queue time.",
        "hosted: not derived: the provider reports no prefill time.",
    ]


def test_no_figures_no_pictures_and_a_sentence_for_each() -> None:
    empty = LabResults(run_id="r", answers=[])
    pictures = question_charts(empty)
    assert set(pictures) == {
        "single",
        "token_ratio",
        "determinism",
        "determinism_load",
        "next_token",
        "token_view",
        "prefill_decode",
        "attribution",
        "prompt_cache",
        "thinking",
        "same_model",
        "vantage",
    }
    for items in pictures.values():
        assert items and all(isinstance(item, str) for item in items)
    assert question_charts(None) == pictures


def test_html_embeds_each_spec_once_and_marks_where_vega_goes() -> None:
    chart = anatomy_chart(picture_lab())
    spans = token_spans(picture_lab())
    assert chart is not None and isinstance(spans, TokenSpans)
    page = render_html([ChartBlock(chart), TokenSpansBlock(spans)], "t")
    assert page.count('class="chart"') == 1
    spec_text = page.split('id="chart0-spec">', 1)[1].split("</script>", 1)[0]
    assert json.loads(spec_text) == json.loads(json.dumps(chart.spec))
    assert "<!--labkit:vega-bundle-->" in page
    assert page.count('class="spans"') == len(spans.rows)


def test_a_table_value_that_rounds_to_zero_has_no_sign() -> None:
    assert [fmt_num(v) for v in (-0.001, 0.0, -0.3, -1234.5)] == ["0.00", "0.00", "-0.30", "-1,234"]


def test_the_next_token_picture_labels_every_token_with_its_entropy() -> None:
    step = NextTokenStep(token="Once", p=0.6, entropy_bits=1.37)
    seen = NextTokenFigures(
        top_k=2,
        inspected=True,
        variants=[NextTokenVariant(variant="t0", params={"temperature": 0}, replies=[[step]])],
    )
    lab = LabResults(
        run_id="r",
        answers=[
            LabAnswer(
                experiment="determinism",
                provider="local",
                question="?",
                answer="!",
                figures=DeterminismFigures(next_token=seen),
            )
        ],
    )
    chart = tokens_chart(lab)
    assert chart is not None
    (value,) = _values(chart)
    assert value["i"] == 1 and value["entropy_bits"] == 1.37  # token 1 is the first
    # Shown, not only on hover: a text mark writes each step's entropy in its cell.
    texts = [layer["encoding"]["text"] for layer in chart.spec["layer"] if "text" in str(layer)]
    assert {"field": "entropy_bits", "format": ".1f"} in texts
    assert "entropy in bits" in chart.caption
    svg = vl_convert.vegalite_to_svg(chart.spec)
    assert "1.4" in svg and "Once" in svg
