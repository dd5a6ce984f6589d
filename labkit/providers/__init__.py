"""Provider adapters, one module each, registered by `kind`.

Importing this package registers the built-in kinds: ``openai``, ``openai_compatible``,
``anthropic``, ``llamacpp``, ``ollama``, ``openai_responses`` and ``fake``.
"""

from labkit.providers import (
    anthropic,
    fake,
    llamacpp,
    ollama,
    openai,
    openai_compatible,
    openai_responses,
)
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    ManagedServerHandle,
    Provider,
    ProviderSettings,
    SamplingParams,
    StreamParser,
    Timeouts,
    TokenCount,
    provider_class,
    provider_kinds,
    register,
    sdk_available,
)
from labkit.providers.llamacpp import bundled_model_settings

__all__ = [
    "ChatRequest",
    "EventClass",
    "ManagedServerHandle",
    "Provider",
    "ProviderSettings",
    "SamplingParams",
    "StreamParser",
    "Timeouts",
    "TokenCount",
    "anthropic",
    "bundled_model_settings",
    "fake",
    "llamacpp",
    "ollama",
    "openai",
    "openai_compatible",
    "openai_responses",
    "provider_class",
    "provider_kinds",
    "register",
    "sdk_available",
]
