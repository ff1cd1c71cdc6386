"""``epochfs sidecar``: a small supervisor over two child processes, the sampler and the view.

The view is the FUSE server (``--view fuse``, the default) or the folder publisher (``--view
folder``: the same layout written as plain files, no mount and no privilege; docs/folderview.md).
The publisher is a child process like the FUSE server, not a thread here, for the same reasons:
a crash or a stall of it (writing 100k symlinks) never delays the probes or the endpoints, it is
restarted alone with backoff, and ``kill -9`` of it is a case its recovery handles.

Why child processes: the two share nothing but the store on the node volume, so a crash of one
never takes the other down, and each can be restarted alone. The supervisor

* checks the mount point first (missing, not a folder, not empty, mounted by something alive,
  the cache folder or one that holds it: :class:`ConfigError`, exit 2; a dead FUSE mount left by
  a crash is lazily unmounted), and once the store is open a ``--link-root`` (a folder, and a
  view of the cache's objects folder);
* stops, exit 2 with the child's reason as its last line and termination message, when the
  sampler or the FUSE server refuses its settings (exit 2 within 30 s of its start): a restart
  would only say it again;
* runs ``epochfs sample`` and ``epochfs mount`` with their settings in ``EPOCHFS_*`` variables
  (``config.to_env``; never on a command line, which any user can read), their
  output on its stderr prefixed ``[sampler]`` / ``[fuse]``;
* restarts a dead sampler with exponential backoff while the mount keeps serving; an exit because
  the remote cannot be reached at its start (or the cache's volume is too full for it) is a
  transient failure, not a crash, and its start again a retry, not a restart: it never fails
  ``/healthz``, and ``/readyz`` and ``epochfs status`` (through :data:`STATE_FILE_NAME`) say it
  with the next retry; an exit on a damaged index is none either, unless it comes on three runs
  in a row with no good run between (:mod:`.indexdamage`);
* notices a dead FUSE server or a dead mount (ENOTCONN, or a stat that hangs past a deadline),
  lazily unmounts and mounts again, never stacking mounts; kills and restarts a hung folder
  publisher (its ``status.json`` and its CPU time still for 30 s);
* on SIGTERM/SIGINT stops the sampler, unmounts (lazily if busy) and exits 0; a second signal kills
  the children, detaches the mount and exits at once;
* serves ``/healthz``, ``/readyz``, ``/metrics`` and the torch client's report endpoint, counts
  samples served from opens of object files (``served.py``), and tells the Kubernetes reporter
  (``epochfs.sidecar.kube``: Events and a status annotation; a no-op outside a cluster) about cuts,
  backpressure, remote errors and remounts.

Children get ``PR_SET_PDEATHSIG`` so that they die with the supervisor even after a ``kill -9``.

A package along its concerns: :mod:`.children` (:class:`Child`, the boot snippet, start, reap,
restart and stop with backoff), :mod:`.childlog` (a child's log pump and why it waits to
restart), :mod:`.indexdamage` (the sampler's exits on a
damaged index in a row, which fail ``/healthz`` at three, and the good run that ends them),
:mod:`.watch` (:func:`probe` and its one-stuck-thread rule, the mount watch and remount, the
folder publisher's liveness), :mod:`.stall` (when the folder publisher is hung), :mod:`.health` (the
``/healthz`` and ``/readyz`` documents), :mod:`.observability` (the metrics registry, the endpoints
on their ports, the served counter, the Kubernetes reporter, the periodic totals), :mod:`.reaper`
(the child subreaper and the orphans it reaps) and :mod:`.core`
(:class:`Supervisor`: the loop, signals and shutdown; :func:`run_sidecar`). This module re-exports
their public names.
"""

from epochfs.sidecar.supervisor.childlog import retry_reason
from epochfs.sidecar.supervisor.children import (
    _CHILD_BOOT,
    Child,
    ChildProcesses,
)
from epochfs.sidecar.supervisor.core import Supervisor, run_sidecar
from epochfs.sidecar.supervisor.health import HealthChecks
from epochfs.sidecar.supervisor.observability import (
    METRICS_DIR_NAME,
    STATE_FILE_NAME,
    Observability,
    load_reporter,
)
from epochfs.sidecar.supervisor.watch import MountWatch, probe

__all__ = [
    "METRICS_DIR_NAME",
    "STATE_FILE_NAME",
    "_CHILD_BOOT",
    "Child",
    "ChildProcesses",
    "HealthChecks",
    "MountWatch",
    "Observability",
    "Supervisor",
    "load_reporter",
    "probe",
    "retry_reason",
    "run_sidecar",
]
