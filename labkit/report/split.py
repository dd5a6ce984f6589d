"""The provider/client split: whose time is it? (docs/measurement.md, "Attribution").

One row per provider × experiment × client path, over the requests that enter statistics
(not warm-up, no error), so that every median is over like-for-like requests and matches the
experiment's own answer:

- provider-reported: ``provider.prefill_ms``, ``provider.decode_ms_per_token``,
  ``provider.processing_ms`` (medians of ``provider_timings.*``);
- client-observed: ``client.ttft_ms``, ``client.decode_ms_per_token``, ``client.connect_ms``,
  ``client.tls_ms`` (medians of ``client.*``);
- network and serving front end: ``network.ttft_minus_prefill_ms`` is the median of the
  per-request difference ``client.ttft_ms - provider_timings.prefill_ms``;
  ``network.decode_diff_ms_per_token`` the median of
  ``client.decode_ms_per_token - provider_timings.decode_ms_per_token``;
- application: ``app.prepare_ms``, ``app.parse_cpu_ms`` (medians), ``app.client_path`` and,
  on the SDK row, ``app.sdk_minus_wire_e2e_ms``: the median of the paired differences
  e2e(sdk) − e2e(wire) of the same planned request (same experiment, same trial), never a
  difference of two pools.

A provider that reports nothing about itself gets the string `NOT_REPORTED` in its
provider cells and `NOT_DERIVABLE` in the differences that would need them, never a
made-up number. Medians are taken over the requests where the value is present.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.load import ensure_columns
from labkit.report.stats import included

__all__ = [
    "NOT_DERIVABLE",
    "NOT_OBSERVED",
    "NOT_REPORTED",
    "SPLIT_COLUMNS",
    "provider_client_split",
]

NOT_REPORTED = "not reported"
NOT_DERIVABLE = "not derivable"
NOT_OBSERVED = "not observed"

# Output column → (kind, source). Kinds: provider (a provider_timings median), client (a
# client median), diff (median of client - provider per request), app (an app median).
_MEDIANS: dict[str, tuple[str, str]] = {
    "provider.prefill_ms": ("provider", "provider_timings.prefill_ms"),
    "provider.decode_ms_per_token": ("provider", "provider_timings.decode_ms_per_token"),
    "provider.processing_ms": ("provider", "provider_timings.processing_ms"),
    "client.ttft_ms": ("client", "client.ttft_ms"),
    "client.decode_ms_per_token": ("client", "client.decode_ms_per_token"),
    "client.connect_ms": ("client", "client.connect_ms"),
    "client.tls_ms": ("client", "client.tls_ms"),
    "app.prepare_ms": ("app", "app.prepare_ms"),
    "app.parse_cpu_ms": ("app", "app.parse_cpu_ms"),
}
_DIFFS: dict[str, tuple[str, str]] = {
    "network.ttft_minus_prefill_ms": ("client.ttft_ms", "provider_timings.prefill_ms"),
    "network.decode_diff_ms_per_token": (
        "client.decode_ms_per_token",
        "provider_timings.decode_ms_per_token",
    ),
}

SPLIT_COLUMNS: list[str] = [
    "provider",
    "experiment",
    "provider_kind",
    "model",
    "n",
    "provider.prefill_ms",
    "provider.decode_ms_per_token",
    "provider.processing_ms",
    "client.ttft_ms",
    "client.decode_ms_per_token",
    "network.ttft_minus_prefill_ms",
    "network.decode_diff_ms_per_token",
    "client.connect_ms",
    "client.tls_ms",
    "app.prepare_ms",
    "app.parse_cpu_ms",
    "app.client_path",
    "app.sdk_minus_wire_e2e_ms",
]

_SOURCES = [src for _, src in _MEDIANS.values()] + ["client.e2e_ms"]


def _median(values: pd.Series) -> float | None:
    v = values.dropna()
    return float(np.median(v.to_numpy(dtype=float))) if len(v) else None


def _joined(values: pd.Series) -> str:
    return ", ".join(sorted({str(v) for v in values.dropna()}))


def _missing_cell(kind: str) -> str:
    return NOT_REPORTED if kind == "provider" else NOT_OBSERVED


def _paired_sdk_minus_wire(sub: pd.DataFrame, paths: pd.Series) -> float | None:
    """Median over planned requests sent on both paths of e2e(sdk) − e2e(wire)."""
    if "plan_key" not in sub.columns:
        return None
    keys = (
        sub["plan_key"]
        .astype(object)
        .map(lambda k: k.removesuffix("/sdk") if isinstance(k, str) else None)
    )
    wire = dict(zip(keys[paths == "wire"], sub.loc[paths == "wire", "client.e2e_ms"], strict=True))
    sdk_e2e = sub.loc[paths == "sdk", "client.e2e_ms"]
    diffs = [
        float(e2e) - float(wire[key])
        for key, e2e in zip(keys[paths == "sdk"], sdk_e2e, strict=True)
        if key is not None and key in wire and pd.notna(e2e) and pd.notna(wire[key])
    ]
    return float(np.median(diffs)) if diffs else None


def provider_client_split(df: pd.DataFrame) -> pd.DataFrame:
    """One row per provider × experiment × client path: provider-reported vs client-observed
    time, and the difference.

    Numeric cells are floats (ms); a cell with nothing to show is a string
    (`NOT_REPORTED`, `NOT_DERIVABLE`, `NOT_OBSERVED`), so the frame is for reading and
    rendering, not arithmetic. Providers with no successful request still get a row (n = 0).
    """
    df = ensure_columns(df, _SOURCES)
    for col in ("provider_kind", "model", "app.client_path", "experiment"):
        if col not in df.columns:
            df = df.assign(**{col: None})
    df = df.assign(
        **{
            "experiment": df["experiment"].astype(object).fillna(""),
            "app.client_path": df["app.client_path"].astype(object).fillna(""),
        }
    )
    rows: list[dict[str, object]] = []
    mask = included(df)
    for provider, of_provider in df.groupby("provider", sort=True, dropna=False):
        ok_provider = of_provider[mask.loc[of_provider.index]]
        groups = list(ok_provider.groupby(["experiment", "app.client_path"], sort=False))
        if not groups:
            groups = [(("", ""), ok_provider)]
        for (experiment, path), sub in groups:
            row: dict[str, object] = {
                "provider": provider,
                "experiment": str(experiment),
                "provider_kind": _joined(of_provider["provider_kind"]),
                "model": _joined(of_provider["model"]),
                "n": len(sub),
            }
            for name, (kind, src) in _MEDIANS.items():
                med = _median(sub[src])
                row[name] = med if med is not None else _missing_cell(kind)
            for name, (client_col, provider_col) in _DIFFS.items():
                diff = sub[client_col] - sub[provider_col]
                med = _median(diff)
                row[name] = med if med is not None else NOT_DERIVABLE
            row["app.client_path"] = str(path) or NOT_OBSERVED
            both = ok_provider[ok_provider["experiment"] == experiment]
            paired = (
                _paired_sdk_minus_wire(both, both["app.client_path"]) if path == "sdk" else None
            )
            row["app.sdk_minus_wire_e2e_ms"] = paired if paired is not None else NOT_OBSERVED
            rows.append(row)
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS).astype(object)
