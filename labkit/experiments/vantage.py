"""`vantage`: whose time is it — proven by sending the same requests from two or more places.

Each vantage point is a route to the same server: a relay labkit controls (`labkit.wire.relay`,
holding each direction's bytes for half the configured `delay_ms`) or `direct`. Trials are
paired (trial i from every vantage back to back, one request in flight) and each request's
TTFT is split as `attribution` splits it (`labkit.analysis.split`). If the split is right,
the provider's share does not move between vantages and the network's moves by the
configured difference: the answer says whether both held. Routes, pairing and the pause:
docs/experiments.md, "Vantage points: whose time, proven".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt, model_validator

from labkit.analysis.vantage import vantage_figures
from labkit.errors import ConfigError, ProviderUnavailable
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.providers.base import ChatRequest, ClientPath, Provider, ProviderSettings
from labkit.records import LabAnswer, RequestRecord
from labkit.wire.relay import DelayRelay, RelayRoute
from labkit.wording.vantage import vantage_answer

__all__ = ["VantageExperiment", "VantagePoint", "VantageSettings"]


class VantagePoint(BaseModel):
    """One place the requests are sent from: a route and what it adds to TTFT."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")
    route: Literal["relay", "direct", "netem"] = Field(
        default="relay",
        description="`relay`: labkit's delaying TCP relay on 127.0.0.1; `direct`: no relay; "
        "`netem`: a network namespace with netem (needs the kernel's netem qdisc; not "
        "implemented, refused).",
    )
    delay_ms: NonNegativeFloat = Field(
        default=0.0,
        le=10_000,
        description="The round trip the route adds to TTFT (half each way), in ms.",
    )
    jitter_ms: NonNegativeFloat = Field(
        default=0.0,
        description="Each chunk's delay varies uniformly by ± half this each way (seeded).",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _sound(self) -> VantagePoint:
        if self.route == "netem":
            raise ValueError(
                f"vantage {self.name!r}: route netem needs the kernel's netem qdisc and is not "
                "implemented; use route relay (labkit's delaying relay on 127.0.0.1)"
            )
        if self.route == "direct" and (self.delay_ms or self.jitter_ms):
            raise ValueError(
                f"vantage {self.name!r}: a direct route adds no delay; use route relay"
            )
        if self.jitter_ms > self.delay_ms:
            raise ValueError(
                f"vantage {self.name!r}: jitter_ms {self.jitter_ms:g} above delay_ms "
                f"{self.delay_ms:g} would need negative delays"
            )
        return self


def _wire_only() -> list[ClientPath]:
    return ["wire"]


def _default_vantages() -> list[VantagePoint]:
    return [
        VantagePoint(name="near", delay_ms=0.0),
        VantagePoint(name="far", delay_ms=40.0, jitter_ms=4.0, seed=1),
    ]


class VantageSettings(ExperimentSettings):
    """A short prompt sent `repeats` times from every vantage, paired by trial."""

    kind: Literal["vantage"] = "vantage"
    prompt: str = Field(default="Say hello in five words.", min_length=1)
    repeats: PositiveInt = Field(default=12, ge=2, description="Trials (pairs) per vantage.")
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 8, "temperature": 0})
    pause_ms: NonNegativeFloat = Field(
        default=100.0,
        le=60_000,
        description="Idle time before each request, so each finds the server and this host "
        "idle (a request sent the moment the last ended meets its leftover work, which a "
        "longer route would hide, and the provider's share would move).",
    )
    vantages: list[VantagePoint] = Field(
        default_factory=_default_vantages,
        min_length=2,
        description="The routes, the first the reference every other is compared with.",
    )
    paths: list[ClientPath] | None = Field(
        default_factory=_wire_only, description="The wire only: a route is labkit's own."
    )

    @model_validator(mode="after")
    def _distinct(self) -> VantageSettings:
        names = [v.name for v in self.vantages]
        if len(set(names)) != len(names):
            raise ValueError("vantages: each name once")
        if self.paths != ["wire"]:
            raise ValueError("vantage runs on the wire only (paths: [wire])")
        return self


def _upstream(base_url: str) -> tuple[str, int]:
    url = httpx.URL(base_url)
    return url.host, url.port or (443 if url.scheme == "https" else 80)


@register_experiment
class VantageExperiment(Experiment):
    """The same requests from several routes at once: the split's proof."""

    kind: ClassVar[str] = "vantage"
    settings_model: ClassVar[type[ExperimentSettings]] = VantageSettings
    question: ClassVar[str] = (
        "Is the split of a request's time proven: from two places at once, does the "
        "provider's share stay put while the network's moves by the added delay?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._relays: dict[str, dict[str, DelayRelay]] = {}

    @property
    def _s(self) -> VantageSettings:
        assert isinstance(self.settings, VantageSettings)
        return self.settings

    def validate_for(self, settings: ProviderSettings) -> None:
        """A relay carries plain HTTP only: TLS would be checked against 127.0.0.1."""
        relayed = any(v.route == "relay" for v in self._s.vantages)
        try:
            base_url = settings.resolved_base_url()
        except ProviderUnavailable:
            return  # known once the run starts its server (managed: plain HTTP on loopback)
        if relayed and httpx.URL(base_url).scheme != "http":
            raise ConfigError(
                f"vantage: provider {settings.id!r} is reached over TLS; a relay vantage "
                "needs a plain-HTTP server (a local one, or a plain-HTTP gateway)"
            )

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and trials, from every vantage."""
        return (self._s.warmup + self._s.repeats) * len(self._s.vantages)

    async def prepare(self, provider: Provider) -> None:
        """Start one relay per relay vantage, to the provider's server."""
        self.close_relays(provider.id)
        upstream = _upstream(provider.settings.resolved_base_url())
        relays = {}
        for v in self._s.vantages:
            if v.route == "relay":
                relay = DelayRelay(upstream, RelayRoute(v.delay_ms, v.jitter_ms, v.seed))
                relay.start()
                relays[v.name] = relay
        self._relays[provider.id] = relays

    async def finalize(self, provider: Provider, records: list[RequestRecord]) -> None:
        """Stop this provider's relays."""
        self.close_relays(provider.id)

    def close_relays(self, provider_id: str) -> None:
        """Stop the relays started for `provider_id` (none: nothing)."""
        for relay in self._relays.pop(provider_id, {}).values():
            relay.close()

    def _relay_account(self, relay: DelayRelay) -> Callable[[RequestRecord], None]:
        """A record hook tagging what the relay truly held this request, by its own account
        (`vantage_up_ms`, `vantage_down_ms`: the request up, the first event down)."""

        def tag(record: RequestRecord) -> None:
            start, ttft = record.t_start_mono_ns, record.client.ttft_ms
            if start is None or ttft is None:
                return
            held = relay.added_ms(start, start + int(ttft * 1e6))
            if held is not None:
                record.tags["vantage_up_ms"], record.tags["vantage_down_ms"] = held

        return tag

    def _request(self, provider: Provider, v: VantagePoint) -> ChatRequest:
        request = ChatRequest(self.messages(self._s.prompt), dict(self._s.params), "vantage")
        relay = self._relays.get(provider.id, {}).get(v.name)
        if relay is not None and relay.port is not None:
            request.route = ("127.0.0.1", relay.port)
        return request

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups from every vantage, then each trial from every vantage back to back,
        the order reversed on odd trials."""
        if v_missing := [
            v.name
            for v in self._s.vantages
            if v.route == "relay" and v.name not in self._relays.get(provider.id, {})
        ]:
            raise ConfigError(f"vantage: no relay started for {', '.join(v_missing)}")
        for i in range(self._s.warmup):
            for v in self._s.vantages:
                yield PlannedRequest(
                    key=f"{self.name}/warmup/{i}/{v.name}",
                    request=self._request(provider, v),
                    trial=i,
                    warmup=True,
                    tags=self._tags(v),
                )
        for trial in range(self._s.repeats):
            order = self._s.vantages if trial % 2 == 0 else self._s.vantages[::-1]
            for v in order:
                relay = self._relays.get(provider.id, {}).get(v.name)
                yield PlannedRequest(
                    key=f"{self.name}/{trial}/{v.name}",
                    request=self._request(provider, v),
                    trial=trial,
                    tags=self._tags(v),
                    pause_s=self._s.pause_ms / 1000,
                    on_record=self._relay_account(relay) if relay is not None else None,
                )

    @staticmethod
    def _tags(v: VantagePoint) -> dict[str, str | int | float | bool]:
        return {
            "vantage": v.name,
            "vantage_route": v.route,
            "vantage_delay_ms": v.delay_ms,
            "vantage_jitter_ms": v.jitter_ms,
        }

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Each vantage's shares and each one's paired shift against the first."""
        f = vantage_figures(records, [v.name for v in self._s.vantages])
        if not any(v.n for v in f.vantages):
            return self.answer(
                provider_id, model, "No successful request from any vantage.", f, "failed"
            )
        status: Literal["ok", "partial"] = "ok" if all(v.n for v in f.vantages) else "partial"
        return self.answer(provider_id, model, vantage_answer(f), f, status)
