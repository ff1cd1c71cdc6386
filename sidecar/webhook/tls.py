"""The webhook's certificate, read again when cert-manager renews it.

The kubelet swaps the mounted Secret's files; the next TLS handshakes get the new pair with no
restart. asyncio sets up every accepted TLS connection with ``SSLContext.wrap_bio``: the context
the server listens with (:meth:`TLSFiles.server_context`) hands that to the latest pair's own
context, built again when a file changed (two ``stat`` calls per connection). A new context per
renewal, rather than ``load_cert_chain`` again on one, because a half-written pair would leave
that context a certificate without its key; here a pair that fails to load is retried at the next
connection while the previous one keeps serving.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path

from epochfs.sidecar.config import ConfigError

log = logging.getLogger("epochfs.webhook")


class TLSFiles:
    """The server's certificate: an SSLContext built again when the certificate or key file changes."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._refused: tuple[tuple[int, int, int], ...] | None = None
        """The files' stamp when they last failed to load: not tried again until they change, as
        every connection would otherwise read and refuse the same pair."""
        self._warned = ""
        """The last failure logged: one line per new failure, not one per connection."""
        self._context: ssl.SSLContext | None = None
        self.context()  # a missing or bad pair stops the server at start

    def _stamp_now(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(
            (st.st_mtime_ns, st.st_size, st.st_ino) for st in (os.stat(self.cert), os.stat(self.key))
        )

    def context(self) -> ssl.SSLContext:
        """The current pair's context; a fresh one is built only when a file changed (two stats)."""
        with self._lock:
            stamp = None
            try:
                stamp = self._stamp_now()
                if stamp != self._stamp and stamp != self._refused:
                    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                    ctx.load_cert_chain(self.cert, self.key)
                    if self._context is not None:
                        log.info("webhook: serving the renewed certificate %s", self.cert)
                    self._context, self._stamp, self._warned = ctx, stamp, ""
            except (OSError, ssl.SSLError) as e:
                if self._context is None:
                    raise ConfigError(_refusal(self.cert, self.key, e)) from None
                # The stamp of the files this load read, not one taken after it: a pair completed
                # in between is a change, loaded at the next connection.
                self._refused = stamp
                if str(e) != self._warned:
                    self._warned = str(e)
                    log.warning(
                        "webhook: cannot load %s / %s (%s); the previous certificate keeps serving",
                        self.cert,
                        self.key,
                        e,
                    )
            assert self._context is not None
            return self._context

    def server_context(self) -> ssl.SSLContext:
        """The context to listen with: each new connection is set up from the current pair."""
        ctx = _RenewingContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.files = self
        return ctx


def _refusal(cert: Path, key: Path, e: OSError) -> str:
    """Which file of the pair cannot be served, in one line naming its flag: OpenSSL's own words
    ("[SSL] PEM lib (_ssl.c:3905)") name neither the flag nor the file."""
    if not isinstance(e, ssl.SSLError):  # missing, unreadable
        flag, path = ("--tls-key", key) if e.filename == str(key) else ("--tls-cert", cert)
        return f"{flag} {path}: {e.strerror or e}"
    try:
        ssl.create_default_context(cafile=str(cert))  # the certificate alone
    except (ssl.SSLError, OSError):
        return f"--tls-cert {cert}: not a PEM certificate ({e})"
    return f"--tls-key {key}: not the PEM private key of --tls-cert {cert} ({e})"


class _RenewingContext(ssl.SSLContext):
    """Every accepted connection is set up from the latest context of :class:`TLSFiles` (see the
    module's docstring for why a new context per renewal)."""

    files: TLSFiles

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.files.context().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
