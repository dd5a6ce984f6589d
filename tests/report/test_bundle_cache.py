"""The HTML report's Vega script is bundled once per vl-convert version, then read back."""

from __future__ import annotations

from pathlib import Path

import pytest
import vl_convert

from labkit.report.charts import javascript_bundle

pytestmark = pytest.mark.unit


def test_the_bundle_is_made_once_and_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    made: list[int] = []
    monkeypatch.setattr(
        vl_convert, "javascript_bundle", lambda: made.append(1) or "/* vega */", raising=True
    )
    assert javascript_bundle() == "/* vega */"
    assert javascript_bundle() == "/* vega */"
    assert made == [1]
    assert [p.name for p in tmp_path.iterdir()] == [f"vega-bundle-{vl_convert.__version__}.js"]


def test_an_unwritable_cache_still_gives_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda: "/* vega */", raising=True)
    assert javascript_bundle() == "/* vega */"
