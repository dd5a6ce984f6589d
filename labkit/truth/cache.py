"""The fake server's prefix cache: a repeated prompt prefix is read, not computed again.

Each served request leaves an entry: its prompt's tokens followed by its reply's. A new
prompt's cached tokens are the longest prefix it shares with a live entry, less one token
(llama.cpp's rule: the last prompt token is always evaluated, so a repeated prompt of n
tokens reports n − 1 cached). Entries are kept up to a capacity in tokens, the least
recently used evicted first, and expire a lifetime after their last use. Prefixes are
found through a hash of every prefix of every entry, so a lookup costs the prompt's length,
not the cache's size.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

__all__ = ["PrefixCache"]


def _prefix_hashes(tokens: Sequence[int]) -> list[int]:
    """A hash of each prefix: element k stands for ``tokens[: k + 1]``."""
    out = []
    h = 0
    for token in tokens:
        h = hash((h, token))
        out.append(h)
    return out


class PrefixCache:
    """Entries of token sequences, LRU up to `capacity` tokens, each expiring `lifetime_s`
    after its last use (0: never); `clock` reads seconds (monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: entry id → (its prefix hashes, when last used), least recently used first
        self._entries: OrderedDict[int, tuple[list[int], float]] = OrderedDict()
        self._owner: dict[int, int] = {}  # prefix hash → the entry that last held it
        self._count: dict[int, int] = {}  # prefix hash → entries holding it
        self._ids = 0
        self.tokens = 0

    def _expire(self, lifetime_s: float, now: float) -> None:
        if lifetime_s <= 0:
            return
        while self._entries:
            key, (_, used) = next(iter(self._entries.items()))
            if now - used < lifetime_s:
                return
            self._remove(key)

    def _remove(self, key: int) -> None:
        hashes, _ = self._entries.pop(key)
        self.tokens -= len(hashes)
        for h in hashes:
            left = self._count[h] - 1
            if left:
                self._count[h] = left
            else:
                del self._count[h]
                self._owner.pop(h, None)

    def lookup(self, prompt: Sequence[int], lifetime_s: float) -> int:
        """The tokens of `prompt` the cache holds (at most all but its last); the entry that
        held them counts as used now."""
        now = self.clock()
        self._expire(lifetime_s, now)
        if not self._entries:
            return 0
        found, owner = 0, None
        for k, h in enumerate(_prefix_hashes(prompt)):
            if h not in self._count:
                break
            found, owner = k + 1, self._owner.get(h)
        if owner is not None and owner in self._entries:
            self._entries[owner] = (self._entries[owner][0], now)
            self._entries.move_to_end(owner)
        return min(found, max(len(prompt) - 1, 0))

    def store(self, tokens: Sequence[int], capacity: int, lifetime_s: float) -> None:
        """Keep `tokens` (a prompt and its reply; its first `capacity` when longer), then
        evict the least recently used entries down to `capacity` tokens."""
        if capacity <= 0 or not tokens:
            return
        now = self.clock()
        self._expire(lifetime_s, now)
        hashes = _prefix_hashes(tokens[:capacity])
        held = 0
        while held < len(hashes) and hashes[held] in self._count:
            held += 1
        if held:
            owner = self._owner.get(hashes[held - 1])
            if owner is not None and owner in self._entries:
                if held == len(hashes):  # held whole already: only used again
                    self._entries[owner] = (self._entries[owner][0], now)
                    self._entries.move_to_end(owner)
                    return
                if len(self._entries[owner][0]) == held:  # the new one extends it
                    self._remove(owner)
        key = self._ids
        self._ids += 1
        self._entries[key] = (hashes, now)
        self.tokens += len(hashes)
        for h in hashes:
            self._count[h] = self._count.get(h, 0) + 1
            self._owner[h] = key
        while self.tokens > capacity and len(self._entries) > 1:
            self._remove(next(iter(self._entries)))
