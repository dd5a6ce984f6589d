"""labkit's exception tree. Every error a user can cause is one of these, with one clear message.

`LabkitError` is the base of `ConfigError`, `ProviderUnavailable`, `SetupError`, `ServerError`
and `RunError`. Per-request failures (HTTP status, timeouts, malformed streams) are not
exceptions: they are measured and stored in the record's ``error`` field. Inside the recorder
a parser signals a malformed stream with `MalformedStream` (not a LabkitError: it never
reaches the CLI); any other exception escaping a parser is labkit's own bug and is recorded
as ``error.kind = internal``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LabkitError",
    "MalformedStream",
    "ProviderUnavailable",
    "RunError",
    "ServerError",
    "SetupError",
]


class LabkitError(Exception):
    """Base class: the CLI prints the message and exits non-zero, without a traceback."""


class ConfigError(LabkitError):
    """The configuration is not valid (the message names the file and field path)."""


class ProviderUnavailable(LabkitError):
    """A provider cannot run in this environment (missing key, e.g. its key variable is
    unset; missing server)."""


class SetupError(LabkitError):
    """The local llama-server binary or model could not be made available (found, built or
    fetched)."""


class ServerError(LabkitError):
    """The managed llama-server failed to start, or died."""


class RunError(LabkitError):
    """A run folder cannot be written, read or resumed."""


class MalformedStream(Exception):
    """A response's bytes or values are not what the provider's protocol allows.

    Raised by stream parsers where a wire value is read (wrong JSON type, undecodable JSON,
    an event over the size limit); the recorder turns it into ``error.kind = protocol``
    with this message. The message must say what arrived, precisely and briefly.
    """
