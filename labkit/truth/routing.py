"""Replicas behind the truth server, each with a prefix cache of its own: where a request's
prompt is looked up and kept (schedule key `cache_replicas`).

A hosted API serves from many machines, and a prompt hits the cache only on the machine
that kept its prefix. OpenAI routes by a hash of the prompt's start combined with the
request's `prompt_cache_key` (platform.openai.com/docs/guides/prompt-caching); this model
keeps the part a probe can test: a request with a key goes to the replica the key hashes
to (CRC-32, so a key's replica is the same in every run), one without to the next replica
in turn. With one replica every request meets the one cache, as before.
"""

from __future__ import annotations

import zlib

from labkit.truth.cache import PrefixCache

__all__ = ["CacheRouter"]


class CacheRouter:
    """The replicas' caches; replica 0's is `first` (the server's own cache)."""

    def __init__(self, first: PrefixCache) -> None:
        self._caches = [first]
        self._turn = 0

    def replica(self, replicas: int, key: str | None) -> int:
        """The replica a request goes to: its key's, else the next in turn."""
        if replicas <= 1:
            return 0
        if key is not None:
            return zlib.crc32(key.encode("utf-8")) % replicas
        self._turn = (self._turn + 1) % replicas
        return self._turn

    def cache_for(self, replicas: int, key: str | None) -> PrefixCache:
        """The prefix cache of the replica this request goes to."""
        index = self.replica(replicas, key)
        while len(self._caches) <= index:
            self._caches.append(PrefixCache(self._caches[0].clock))
        return self._caches[index]
