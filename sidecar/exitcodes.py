"""The exit statuses by which a command tells the supervisor what to do next, besides 0 (done),
1 (a crash) and 2 (a bad setting: :class:`~epochfs.sidecar.config.ConfigError`)."""

from __future__ import annotations

EXIT_RETRY = 75
"""The exit status of a command that cannot go on *now* (EX_TEMPFAIL): the remote unreachable at
the sampler's start, a store still starting or an outage. The supervisor starts it again after its
backoff and counts no crash (``/healthz`` stays ok: restarting the pod would not bring the remote
back); the CLI's last line, ``epochfs <command>: <reason>``, says why, as for exit 2."""

EXIT_INDEX = 74
"""The exit status (EX_IOERR) of a sampler that met a damaged index while running: the damage is
marked, and the next start's check replaces the index from the members files in seconds
(:mod:`epochfs.sidecar.store.reset`). The supervisor starts it again at once and counts no crash:
a liveness failure would restart the pod for a damage the sidecar mends by itself. A start that
cannot mend it exits 1, a crash."""

INDEX_DAMAGES_UNHEALTHY = 3
"""Sampler exits :data:`EXIT_INDEX` in a row, with no good run between (one during which an epoch
was cut, or that ran 30 s), after which ``/healthz`` fails: replacing the index mends a one-off
damage, but an index damaged again on every run (a failing disk, a volume that corrupts writes)
is no longer the sidecar's to mend, and the pod must be restarted or someone told. The sampler is
still restarted (with a growing backoff), so a cause that passes heals, and ``/healthz`` answers
200 again at the next good run."""


class RetryLater(RuntimeError):
    """Raised for :data:`EXIT_RETRY`; the message is the reason (one line)."""
