"""A provider's own account of a request, fetched after the run (OpenRouter's generation
stats): one `LaterStats` line per record in ``provider-stats-<provider>.jsonl``.

Records are append-only and describe what was seen while the request ran; these figures
arrive seconds later from a second request (`GET /api/v1/generation?id=<response_id>`), so
they live in a file of their own, keyed by `record_id`, and the report joins them. A leaf
module: the report reads these files from a copied run folder with no provider code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labkit.filenames import safe_filename

__all__ = ["LaterStats", "read_later_stats", "stats_file_name"]


class LaterStats(BaseModel):
    """What the provider said about one response when asked after the run."""

    model_config = ConfigDict(extra="ignore")

    record_id: str = Field(default="", description="The record these figures belong to.")
    response_id: str = Field(default="", description="The response id they were asked for.")
    fetched_at: str = Field(default="", description="Wall clock (UTC ISO 8601) of the answer.")
    attempts: int = Field(default=0, description="Requests it took (the stats appear late).")
    source: str = Field(description="What was asked, e.g. `GET /api/v1/generation`.")
    latency_ms: float | None = Field(
        default=None,
        description="The provider's total latency of the request (OpenRouter `latency`, ms).",
    )
    generation_time_ms: float | None = Field(
        default=None, description="The provider's generation time (`generation_time`, ms)."
    )
    moderation_latency_ms: float | None = Field(
        default=None, description="Time spent in moderation (`moderation_latency`, ms)."
    )
    upstream_provider: str | None = Field(
        default=None, description="Who served the request behind the router (`provider_name`)."
    )
    upstream_id: str | None = Field(default=None, description="The upstream's response id.")
    model: str | None = Field(default=None, description="The model that answered.")
    total_cost: float | None = Field(
        default=None, description="What the request cost (`total_cost`, in credits: USD)."
    )
    input_tokens: int | None = Field(default=None, description="`native_tokens_prompt`.")
    output_tokens: int | None = Field(default=None, description="`native_tokens_completion`.")
    error: str | None = Field(
        default=None, description="Why no figures came (never available, refused), else null."
    )
    raw: dict[str, Any] | None = Field(default=None, description="The answer as received.")


def stats_file_name(provider_id: str) -> str:
    """The run folder's file of one provider's stats fetched after the run."""
    return f"provider-stats-{safe_filename(provider_id)}.jsonl"


def read_later_stats(run_dir: Path, provider_id: str) -> dict[str, LaterStats]:
    """One provider's stats by `record_id` (the last line of a record wins); lines that
    are not stats are skipped."""
    path = Path(run_dir) / stats_file_name(provider_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[str, LaterStats] = {}
    for line in lines:
        try:
            stats = LaterStats.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            continue
        if stats.record_id:
            out[stats.record_id] = stats
    return out
