"""TLS for the lean transport, on the same socket reader as plain TCP (`tcp`).

An `ssl.SSLObject` over a pair of `ssl.MemoryBIO`, with the provider's `ssl.SSLContext`
(hostname checked, SNI sent). Decrypted bytes carry the stamps of the raw read that
completed them. Like httpcore, a connection the server closes
without close_notify ends the stream as a close would, and none is sent on close.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

import httpx

from labkit.wire.lean.tcp import READ_SIZE, Connection, Origin, Read

__all__ = ["TLSConnection"]


class TLSConnection(Connection):
    """A connection over TLS: the raw reads are decrypted by the reading task, each
    decrypted run carrying the stamps of the raw read that completed it."""

    def __init__(
        self,
        key: Origin,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        context: ssl.SSLContext,
        server_hostname: str,
    ) -> None:
        super().__init__(key, sock, loop)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._tls_closed = False  # close_notify received

    async def handshake(self, timeout: float | None) -> None:
        """Run the TLS handshake; ssl.SSLError or OSError when it fails."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            self._flush()
            got = await self.read_raw(timeout)
            if got is None:
                raise ConnectionResetError("connection closed during the TLS handshake")
            self._incoming.write(got[0])
        self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending:
            super().write(self._outgoing.read())

    def _decrypt(self, raw: bytes) -> bytes:
        """Application bytes that `raw` completes (none for a session ticket or a partial
        record); a close_notify marks the stream closed."""
        incoming = self._incoming
        incoming.write(raw)
        tls = self._tls
        out = b""
        try:
            # A read of the SSL object gives one record's bytes and takes from the BIO no
            # more than that record: once the BIO is empty, no further read can give any
            # (skipping the call saves raising SSLWantReadError, half the cost of a read).
            while True:
                chunk = tls.read(READ_SIZE)
                if not chunk:  # close_notify
                    self._tls_closed = True
                    break
                out = out + chunk if out else chunk
                if not incoming.pending and not tls.pending():
                    break
        except ssl.SSLWantReadError:
            pass
        if self._outgoing.pending:  # e.g. the reply to a key update
            self._flush()
        return out

    async def read(self, timeout: float | None) -> Read | None:
        """The next decrypted bytes and the stamps of the read that completed them."""
        while not self._tls_closed:
            got = await self.read_raw(timeout)
            if got is None:
                return None  # closed without close_notify: an end, as httpcore takes it
            try:
                data = self._decrypt(got[0])
            except ssl.SSLError as exc:
                self.close()
                raise httpx.ReadError(f"TLS: {exc}") from exc
            if data:
                return data, got[1], got[2], got[3]
        return None

    def write(self, data: bytes) -> None:
        """Encrypt and send `data`."""
        if self.closed:
            return
        try:
            self._tls.write(data)
        except ssl.SSLError:
            self.close()
            return
        self._flush()

    @property
    def usable(self) -> bool:
        """Open and nothing unread; reads that carry no application data (TLS 1.3 session
        tickets) are consumed here, before the connection is taken."""
        while self.inbox and not self.closed:
            raw = self.inbox.popleft()[0]
            try:
                if self._decrypt(raw):
                    return False
            except ssl.SSLError:
                return False
        return not self.closed and not self._tls_closed and not self.buffer and not self.inbox
