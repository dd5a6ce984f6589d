"""YAML configs → validated Pydantic models, with errors that name the file and field path.

A config names a run, its providers (each validated by the settings model of its `kind`)
and its experiments (likewise). Keys are never in a config: a provider names the
*environment variable* holding its key (`api_key_env`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from labkit.boundedyaml import MAX_BYTES, YAMLLimitError, load_bounded
from labkit.errors import ConfigError
from labkit.experiments import ExperimentSettings, experiment_class, experiment_kinds
from labkit.pricing import PriceEntry, PriceTable, check_one_per_date, price_table
from labkit.providers import ProviderSettings, provider_class, provider_kinds, sdk_available
from labkit.scrub import key_prefix, random_looking
from labkit.tracing.settings import TracingSettings

__all__ = [
    "LabConfig",
    "RayExecutorSettings",
    "WatchBudget",
    "WatchClock",
    "WatchSettings",
    "load_config",
    "load_config_data",
    "looks_like_key",
    "parse_config",
    "parse_duration",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: How keys (not variable names) begin: OpenAI/Anthropic/Stripe `sk-`/`sk_`, Groq `gsk_`,
#: Hugging Face `hf_`, xAI `xai-`, GitHub `ghp_`/`github_pat_`, Google `AIza`.
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "hf_", "xai-", "ghp_", "github_pat_", "AIza")
#: A field whose value is never quoted back in an error: it may be a key pasted in.
_SECRET_FIELD = re.compile(r"key|token|secret|password|auth", re.IGNORECASE)


def looks_like_key(name: str) -> bool:
    """Whether an `api_key_env` value is a key pasted in rather than a variable's name.

    Real names are short words joined by `_`, usually UPPER_CASE (`OPENAI_API_KEY`,
    `AZURE_KEY_2`). A key is long, starts with a vendor prefix, or holds a long random run:
    a `_`-separated part of 16+ characters mixing letters and digits, or of 12+ mixing
    lower case, upper case and digits. A 20+ character name with four digits and lower case
    that names no variable set here is taken for a key too.
    """
    if len(name) > 64 or name.startswith(_KEY_PREFIXES):
        return True
    for part in name.split("_"):
        digits = any(c.isdigit() for c in part)
        if len(part) >= 16 and digits and any(c.isalpha() for c in part):
            return True
        if len(part) >= 12 and digits and not part.isupper() and not part.islower():
            return True
    digit_count = sum(c.isdigit() for c in name)
    lower = any(c.islower() for c in name)
    return len(name) >= 20 and digit_count >= 4 and lower and name not in os.environ


class RayExecutorSettings(BaseModel):
    """`executor: {kind: ray, ...}`: paced levels run by Ray actors across a cluster's nodes
    (`labkit.runner.ray_executor`; `pip install labkit[ray]`)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ray"] = "ray"
    address: str = Field(
        default="local",
        description="`local`: a Ray cluster started on this host for the run (and stopped at "
        "its end); `auto`: the running cluster (RAY_ADDRESS, or the one started here with "
        "`ray start`); `ray://host:port`: a remote cluster through Ray Client; `host:port`: a "
        "cluster's GCS address.",
    )
    workers: PositiveInt | Literal["auto"] = Field(
        default="auto",
        description="Actors reading a level's streams; auto: one per CPU the cluster offers "
        "(a closed loop never gets more actors than streams).",
    )
    cpus_per_worker: PositiveFloat = Field(
        default=1.0, description="CPUs each actor reserves on its node (Ray's num_cpus)."
    )
    placement: Literal["spread", "pack"] | list[str] = Field(
        default="spread",
        description="`spread`: actors over as many nodes as possible; `pack`: as few as "
        "possible; a list of custom resource names: actor k on a node that offers resource "
        "`placement[k % len]` (give each node its own resource to pin actors to nodes).",
    )

    @field_validator("address")
    @classmethod
    def _known_address(cls, value: str) -> str:
        if value in ("local", "auto") or value.startswith("ray://") or ":" in value:
            return value
        raise ValueError("expected local, auto, ray://host:port or host:port")

    @field_validator("placement")
    @classmethod
    def _some_resources(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("give at least one resource name, or spread / pack")
        return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from a duration: a number (seconds) or text such as ``90s``, ``10m``,
    ``1.5h``, ``1d``; ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 10m, 90s or 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        found = _DURATION.match(str(value)) if isinstance(value, str) else None
        if found is None:
            raise ValueError("expected a duration such as 10m, 90s or 1h")
        seconds = float(found.group(1)) * _UNIT_S[found.group(2) or "s"]
    if not 0 <= seconds < 1e9:
        raise ValueError("a duration must be between 0 and 10⁹ seconds")
    return seconds


class WatchBudget(BaseModel):
    """`watch.budget`: what the whole watch may spend before it stops (absent: no bound)."""

    model_config = ConfigDict(extra="forbid")

    tokens: PositiveInt | None = Field(
        default=None, description="Input + output tokens over every round (warm-ups included)."
    )
    money: PositiveFloat | None = Field(
        default=None,
        description="Money over every round, in the price table's currency (needs `prices:`).",
    )


class WatchClock(BaseModel):
    """`watch.clock`: real time, or a simulated (compressed) clock for tests and demos."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["real", "simulated"] = "real"
    start: datetime | None = Field(
        default=None,
        description="simulated: the first round's simulated time (UTC, e.g. "
        "2026-01-05T00:00:00Z); rounds run back to back, each standing for its scheduled "
        "simulated time, sent as the header X-Labkit-Sim-Time.",
    )

    @field_validator("start")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @model_validator(mode="after")
    def _start_when_simulated(self) -> WatchClock:
        if self.kind == "simulated" and self.start is None:
            raise ValueError("a simulated clock needs start (e.g. 2026-01-05T00:00:00Z)")
        if self.kind == "real" and self.start is not None:
            raise ValueError("start is for a simulated clock; a real clock starts now")
        return self


class WatchSettings(BaseModel):
    """`watch:`: run the config's probes on a schedule, each round a run, into a store
    (`labkit watch`, docs/watch.md)."""

    model_config = ConfigDict(extra="forbid")

    every: float = Field(
        default=600.0, description="Time between rounds: seconds or 30s / 10m / 1h / 1d."
    )
    jitter: float | str = Field(
        default=0.0,
        description="Each round starts up to this much after its slot: a fraction of "
        "`every` (0.1) or a duration (30s); seeded per round, so a restart keeps it.",
    )
    store: str | None = Field(
        default=None,
        description="Where rounds are stored: a DuckDB file path, or a postgresql:// URL "
        "without a password (PGPASSWORD); default: watch.duckdb in the watch folder.",
    )
    store_env: str | None = Field(
        default=None,
        description="The name of an environment variable holding the store URL (one that "
        "carries a password); instead of `store`.",
    )
    budget: WatchBudget = Field(default_factory=WatchBudget)
    rounds: PositiveInt | None = Field(
        default=None, description="Stop after this many rounds (missed ones included)."
    )
    clock: WatchClock = Field(default_factory=WatchClock)
    keep_cache: list[str] = Field(
        default_factory=list,
        description="Experiments (kinds or names) sent as written: no fresh nonce per round, "
        "so a provider's prompt cache may serve them from an earlier round.",
    )

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < 1:
            raise ValueError("every must be at least 1 second")
        return seconds

    @field_validator("jitter")
    @classmethod
    def _jitter(cls, value: float | str) -> float | str:
        if isinstance(value, float | int) and 0 <= value < 1:
            return value  # a fraction of `every`
        parse_duration(value)
        return value

    @field_validator("clock", mode="before")
    @classmethod
    def _clock_word(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    @field_validator("store_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be the name of an environment variable (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> WatchSettings:
        if self.jitter_s >= self.every:
            raise ValueError("jitter must be less than every (rounds would change places)")
        if self.store is not None and self.store_env is not None:
            raise ValueError("give store or store_env, not both")
        return self

    @property
    def jitter_s(self) -> float:
        """The jitter in seconds (a fraction resolved against `every`)."""
        j = self.jitter
        if isinstance(j, float | int) and 0 <= j < 1:
            return float(j) * self.every
        return parse_duration(j)


#: Request headers a config may set (`LabConfig.request_headers`): labkit's own.
_LABKIT_HEADER = re.compile(r"^x-labkit-[a-z0-9-]{1,40}$", re.IGNORECASE)


class LabConfig(BaseModel):
    """A whole run: providers × experiments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Run name, used in the run folder name.")
    description: str | None = Field(default=None, description="Free text for the manifest.")
    output_dir: Path = Field(default=Path("results"), description="Where run folders go.")
    store_text: bool = Field(default=True, description="Keep generated text in records.")
    providers: list[SerializeAsAny[ProviderSettings]] = Field(min_length=1)
    experiments: list[SerializeAsAny[ExperimentSettings]] = Field(min_length=1)
    executor: RayExecutorSettings | None = Field(
        default=None,
        description="Where paced experiments' levels run: absent, in this process or its "
        "worker processes (`workers`); `{kind: ray, ...}`, on Ray actors.",
    )
    tracing: TracingSettings = Field(
        default_factory=TracingSettings,
        description="W3C trace context on every request and where the run's OpenTelemetry "
        "spans go (`labkit.tracing`, docs/tracing.md).",
    )
    watch: WatchSettings | None = Field(
        default=None,
        description="`labkit watch`: the schedule, store, budget and clock of a watch of "
        "these probes (docs/watch.md); `labkit run` ignores it.",
    )
    request_tags: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Tags put on every record of the run (a watch round's `watch_id`, "
        "`watch_round`, `watch_nonce`); an experiment's own tag of the same name wins.",
    )
    request_headers: dict[str, str] = Field(
        default_factory=dict,
        description="Headers sent with every request, labkit's own only (`X-Labkit-…`: a "
        "simulated watch's `X-Labkit-Sim-Time`).",
    )

    @field_validator("request_headers")
    @classmethod
    def _labkit_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _LABKIT_HEADER.match(name):
                raise ValueError(f"only X-Labkit-… headers may be set here (got {name[:40]!r})")
            if any(c in text for c in "\r\n\0") or len(text) > 200:
                raise ValueError(f"header {name} has a value that cannot be sent")
        return value

    prices: list[PriceEntry] = Field(
        default_factory=list,
        description="The dated price table (docs/pricing.md): entries of provider, model, "
        "date, currency and per-1M-token prices. labkit ships none; costs show only where "
        "it is given.",
    )

    @field_validator("prices")
    @classmethod
    def _one_entry_per_date(cls, value: list[PriceEntry]) -> list[PriceEntry]:
        check_one_per_date(value)
        return value

    def price_table(self) -> PriceTable:
        """The config's prices as a `PriceTable` (empty where none are given)."""
        return price_table(self.prices)

    @field_validator("output_dir", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if isinstance(value, str) and "\0" in value:
            raise ValueError("a path may not contain a NUL byte")
        return value

    def redacted(self) -> dict[str, Any]:
        """The config as JSON data for the manifest (it holds variable names, never keys)."""
        return self.model_dump(mode="json")


def _path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _describe(err: Any) -> str:
    etype = err["type"]
    if etype == "extra_forbidden":
        return "unknown field (not allowed here)"
    if etype == "missing":
        return "required field is missing"
    msg = str(err["msg"])
    value = err.get("input")
    if any(isinstance(part, str) and _SECRET_FIELD.search(part) for part in err["loc"]):
        return msg  # never quote back what may be a key
    if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 40):
        return f"{msg} (got {value!r})"
    return f"{msg} (got {type(value).__name__})"


def _validation_lines(exc: ValidationError, prefix: str) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        lines.append(f"{_path(loc, prefix)}: {_describe(err)}")
    return lines


def _validate_entries(
    data: dict[str, Any], section: str, kinds: list[str], lookup: Any, errors: list[str]
) -> list[Any]:
    raw = data.get(section)
    if raw is None:
        errors.append(f"{section}: required field is missing")
        return []
    if not isinstance(raw, list):
        errors.append(f"{section}: expected a list (got {type(raw).__name__})")
        return []
    out = []
    for i, entry in enumerate(raw):
        where = f"{section}[{i}]"
        if not isinstance(entry, dict):
            errors.append(f"{where}: expected a mapping (got {type(entry).__name__})")
            continue
        kind = entry.get("kind")
        if kind not in kinds:
            got = "missing" if kind is None else f"unknown kind {kind!r}"
            errors.append(f"{where}.kind: {got}; expected one of: {', '.join(kinds)}")
            continue
        if section == "providers":
            if "api_key" in entry or "key" in entry:
                errors.append(
                    f"{where}: keys do not belong in a config; export the key in an "
                    "environment variable and give its name in api_key_env"
                )
                continue
            env = entry.get("api_key_env")
            if isinstance(env, str) and not _ENV_NAME.match(env):
                errors.append(
                    f"{where}.api_key_env: must be the name of an environment variable "
                    "(letters, digits, _), not the key itself"
                )
                continue
            url_env = entry.get("base_url_env")
            if isinstance(url_env, str) and not _ENV_NAME.match(url_env):
                errors.append(
                    f"{where}.base_url_env: must be the name of an environment variable "
                    "(letters, digits and _, not starting with a digit); put a URL itself in "
                    "base_url"
                )
                continue
            if isinstance(env, str) and looks_like_key(env):
                errors.append(
                    f"{where}.api_key_env: this looks like a key, not the name of an "
                    "environment variable (not shown); export the key in a variable and give "
                    "the variable's name here, e.g. OPENAI_API_KEY"
                )
                continue
        try:
            out.append(lookup(kind).settings_model.model_validate(entry))
        except ValidationError as exc:
            errors.extend(_validation_lines(exc, where))
    return out


def _sdk_only_without_sdk(data: dict[str, Any], providers: list[ProviderSettings]) -> list[str]:
    """`paths: [sdk]` cannot run on a provider without an official SDK (`[wire, sdk]` can:
    it sends only the wire copy there)."""
    no_sdk = [p.id for p in providers if not sdk_available(p.kind)]
    raw = data.get("experiments")
    entries = raw if isinstance(raw, list) else []
    return [
        f"experiments[{i}].paths: [sdk] needs an official SDK, which provider {pid!r} does "
        "not have; use [wire, sdk] to measure the SDK where there is one"
        for i, entry in enumerate(entries)
        if isinstance(entry, dict) and entry.get("paths") == ["sdk"]
        for pid in no_sdk
    ]


def _unknown_references(experiments: list[ExperimentSettings], ids: list[str]) -> list[str]:
    """An experiment that compares providers with a `reference` one must name a provider of
    the config."""
    return [
        f"experiments[{i}].reference: no provider with id {ref!r} in providers; expected one "
        f"of: {', '.join(ids)}"
        for i, exp in enumerate(experiments)
        if isinstance(ref := getattr(exp, "reference", None), str) and ids and ref not in ids
    ]


def _unknown_price_providers(data: dict[str, Any], ids: list[str]) -> list[str]:
    """A price entry naming a provider id the config does not have (a typo would leave
    that provider unpriced without a word)."""
    raw = data.get("prices")
    entries = raw if isinstance(raw, list) else []
    return [
        f"prices[{i}].provider: no provider with id {entry['provider']!r} in providers; "
        f"expected one of: {', '.join(ids)} (or leave it out to price the model anywhere)"
        for i, entry in enumerate(entries)
        if isinstance(entry, dict)
        and isinstance(entry.get("provider"), str)
        and ids
        and entry["provider"] not in ids
    ]


def parse_config(data: Any, source: str = "<config>") -> LabConfig:
    """Validate already-parsed YAML data; raise one ConfigError listing every problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    errors: list[str] = inline_secrets(data)
    providers = _validate_entries(data, "providers", provider_kinds(), provider_class, errors)
    experiments = _validate_entries(
        data, "experiments", experiment_kinds(), experiment_class, errors
    )
    ids = [p.id for p in providers]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        errors.append(f"providers: id {dup!r} is used more than once")
    errors.extend(_sdk_only_without_sdk(data, providers))
    errors.extend(_unknown_price_providers(data, ids))
    errors.extend(_unknown_references(experiments, ids))
    config = None
    try:
        config = LabConfig.model_validate(
            {**data, "providers": providers, "experiments": experiments}
        )
    except ValidationError as exc:
        for line in _validation_lines(exc, ""):
            if not (line.startswith(("providers", "experiments")) and errors):
                errors.append(line)
    if config is not None and config.executor is not None and not _ray_installed():
        errors.append(
            "executor: kind ray needs Ray, which is not installed here; pip install 'labkit[ray]'"
        )
    if errors or config is None:
        if len(errors) == 1:  # one problem, one line
            raise ConfigError(f"{source}: invalid config: {errors[0]}")
        listing = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"{source}: invalid config\n{listing}")
    return config


def _ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def load_config(path: str | Path) -> LabConfig:
    """Read and validate a YAML config file (bounded: `labkit.boundedyaml`)."""
    return parse_config(load_config_data(path), str(path))


def load_config_data(path: str | Path) -> Any:
    """A YAML config file as data, read within `labkit.boundedyaml`'s bounds, not yet
    validated (`parse_config` does that); one clear `ConfigError` where it cannot be read."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config: {exc}") from None
    except ValueError:  # open's only ValueError: a NUL byte in the path
        raise ConfigError(f"{str(p)!r}: a path may not contain a NUL byte") from None
    return load_yaml_text(text, str(p))


def load_yaml_text(text: str, source: str = "<config>") -> Any:
    """YAML text as data, within `labkit.boundedyaml`'s bounds; ConfigError (one line, naming
    `source`) for text that is not YAML or breaks a bound."""
    try:
        return load_bounded(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = (getattr(exc, "problem", None) or str(exc) or type(exc).__name__).splitlines()[0]
        raise ConfigError(f"{source}: not valid YAML{where}: {problem}") from None
    except YAMLLimitError as exc:
        raise ConfigError(f"{source}: config refused: {exc}") from None


# --- Secrets written into a config -------------------------------------------------------
# A config is copied into every run folder's manifest (and resume reads it back from
# there), so a secret in it cannot be scrubbed without breaking the resume: it is refused.

#: Key formats with a fixed prefix: OpenAI/Anthropic/Stripe, Groq, Hugging Face, xAI,
#: GitHub, GitLab, Slack, Google, AWS access key ids. What follows the prefix is a key only
#: where it is random (`labkit.scrub.random_looking`): `xai-grok-4-fast-reasoning` is a name.
_KEY_LITERAL = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-|sk_|gsk_|hf_|xai-|ghp_|gho_|github_pat_|glpat-|xox[abpr]-|AIza|AKIA)"
    r"[A-Za-z0-9_\-]{16,}"
)
#: Prefixes after which any 16+ characters are a key, words or not.
_STRICT_PREFIXES = ("AIza", "AKIA", "glpat-")
#: A long random run of letters and digits, in both cases: a token, not a word or a model name.
_RANDOM_RUN = re.compile(r"[A-Za-z0-9]{32,}")
#: A URL carrying credentials (`scheme://user:password@host`).
#: Bounded runs, so a long word cannot make the search quadratic.
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/?#@\s]{0,512}@")
#: Body fields that hold credentials, under any provider's `extra_body` or `params`.
_SECRET_BODY_FIELD = re.compile(
    r"(?:^|[_\-])(?:api[_\-]?key|apikey|secret|password|passwd|token|access[_\-]?token|"
    r"auth|authorization|bearer|credentials?|private[_\-]?key)$",
    re.IGNORECASE,
)


def _vendor_key(text: str) -> bool:
    """Whether `text` holds a vendor prefix followed by 16+ random characters (a prefix and
    words, `hf_novita_sla_metrics_replay`, is a name)."""
    for found in _KEY_LITERAL.finditer(text):
        literal = found.group()
        # No name begins so, and GitLab's 20 random characters may hold `-` and `_`, which
        # cut them into runs that read as words 1 time in 900: any body is a key.
        if literal.startswith(_STRICT_PREFIXES):
            return True
        if random_looking(literal[len(key_prefix(literal)) :]):
            return True
    return False


def looks_like_secret(text: str) -> bool:
    """Whether free text (a run name, a value in a config) holds something key-shaped: a
    vendor prefix followed by 16+ random characters (not words: `_vendor_key`), a random run
    of 32+ letters and digits in both cases, or URL credentials."""
    if _vendor_key(text) or _URL_USERINFO.search(text):
        return True
    return any(
        any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
        for run in _RANDOM_RUN.findall(text)
    )


def _env_keys(data: dict[str, Any]) -> list[str]:
    """The keys the config's `api_key_env` variables hold here (to find one pasted in)."""
    providers = data.get("providers")
    names = (
        [p.get("api_key_env") for p in providers if isinstance(p, dict)]
        if isinstance(providers, list)
        else []
    )
    values = [
        os.environ.get(n, "").strip() for n in names if isinstance(n, str) and _ENV_NAME.match(n)
    ]
    return [v for v in values if len(v) >= 8]


def inline_secrets(data: dict[str, Any]) -> list[str]:
    """One error per place in a config's data that holds a secret (never quoting it): a
    key-shaped string anywhere (the run name included), URL credentials, a key that one of
    its `api_key_env` variables holds, or a credential field in `extra_body` / `params`."""
    keys = _env_keys(data)
    found: list[str] = []

    def visit(value: Any, where: str, in_body: bool) -> None:
        if isinstance(value, str):
            if where.endswith(("].api_key_env", "].base_url_env")):
                return  # checked, with a message of their own, in `_validate_entries`
            if looks_like_secret(value) or any(k in value for k in keys):
                found.append(where)
        elif isinstance(value, dict):
            for k, v in value.items():
                name = str(k)
                path = f"{where}.{name}" if where else name
                if looks_like_secret(name):
                    found.append(where or "(top level)")
                elif in_body and isinstance(v, str) and v and _SECRET_BODY_FIELD.search(name):
                    found.append(path)
                else:
                    visit(
                        v,
                        path,
                        in_body
                        or (where.startswith("providers[") and name in ("extra_body", "params")),
                    )
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, f"{where}[{i}]", in_body)

    visit(data, "", False)
    return [
        f"{where}: holds what looks like a key, token or password (not shown); a config is "
        "copied into every run folder, so credentials go in environment variables "
        "(api_key_env for a provider's key)"
        for where in found
    ]
