"""The sidecar's HTTP endpoints: ``/healthz``, ``/readyz``, ``/metrics`` and the client report.

``POST /v1/client-report`` takes a JSON body ``{"samples": int, "bytes": int, "wait_seconds": float}``
(increments since the client's previous report) from the torch client on the pod's loopback; other
addresses get 403, so nothing outside the pod can inflate the numbers. Its query may name the
epochs the client reads (``?epoch=N``, repeated), pinned while it names them (the folder view's
only sign that they are in use), and the reporter (``&client=<hex id>``), so that its later report
naming other epochs releases these (a query, so that older sidecars, which refuse unknown body
fields, still take the epochs; the client drops ``client`` when a sidecar refuses it).
``POST /v1/cut?epoch=N[&jump=1]`` (loopback only, no body) asks for a cut as a lookup of
``epoch-N`` does on the FUSE view (:mod:`epochfs.sidecar.cutrequest`), on a worker of its own.

Anyone who reaches the port can connect, so the server's cost is bounded whatever they send
(docs/sidecar.md, "HTTP endpoints under load"):

* **Both address families.** Host :data:`ALL_ADDRESSES` (``"::"``, the sidecar's) is one dual-stack
  socket, so the kubelet's probes reach it on an IPv6-only or dual-stack cluster too; a kernel
  without IPv6 gets ``0.0.0.0`` instead (:mod:`.listen`).

* **One I/O thread** (a ``selectors`` loop) accepts, reads and writes every connection without
  blocking; no thread per connection. Requests are parsed there with fixed limits on the head
  (:class:`Limits`), the body and, for reports, the JSON nesting.
* **A fixed set of worker threads** runs what may block: one per check (``/healthz``,
  ``/readyz``), one for ``/metrics``, one for client reports and one for cut requests (bounded
  queues; full: 503 with ``Retry-After``). Checks and ``/metrics`` are *single-flight*: requests
  that arrive while one runs wait for its answer, so a flood of probes costs one check at a time
  and can never queue behind reports, cuts or scrapes. A check that has not answered within
  ``check_timeout`` gets 503.
* **A cap on open connections.** At the cap a new connection closes the oldest connection that
  has no request in progress (one that finished and is lingering first, then the one that has
  waited longest for its request); when every connection has a request in progress, the new one is
  closed. A probe, which sends its request at once, is never the oldest: it always gets in.
* **Deadlines, never per-byte timeouts**: a request (head and body) must arrive within
  ``request_timeout`` of the connection (or of the previous response on a keep-alive connection),
  so a client trickling a byte a second is closed as one that sends nothing; a response must be
  read within the same time.
* :meth:`Endpoints.stop` wakes the loop, closes every socket and returns within about a second
  whatever the load; worker threads are daemons and never delay the process's exit.

A package along those seams: :mod:`.http11` (the limits, request heads parsed, replies written:
no sockets), :mod:`.report` (the client report's validation), :mod:`.conn` (a connection's states),
:mod:`.connections` (the I/O loop: selectors, deadlines, the cap and eviction), :mod:`.workers`
(queued workers and single-flight checks), :mod:`.listen` (the listening socket's families) and
:mod:`.server` (:class:`Endpoints`, the routes wiring them). This module re-exports their public
names.
"""


from epochfs.sidecar.endpoints.conn import (
    ACCEPT_BATCH,
    BODY,
    BUSY,
    CLOSED,
    LINGER,
    LINGER_DISCARD,
    RECV_BYTES,
    WAITING,
    WRITING,
)
from epochfs.sidecar.endpoints.http11 import Limits, Reply
from epochfs.sidecar.endpoints.report import (
    CLIENT_REPORT_PATH,
    MAX_JSON_DEPTH,
    MAX_REPORT_BYTES,
    MAX_REPORT_EPOCHS,
    ClientReport,
    json_depth,
)
from epochfs.sidecar.endpoints.server import Endpoints
from epochfs.sidecar.endpoints.workers import Check, check_reply, metrics_reply
from epochfs.sidecar.listen import ALL_ADDRESSES

__all__ = [
    "ACCEPT_BATCH",
    "ALL_ADDRESSES",
    "BODY",
    "BUSY",
    "CLIENT_REPORT_PATH",
    "CLOSED",
    "LINGER",
    "LINGER_DISCARD",
    "MAX_JSON_DEPTH",
    "MAX_REPORT_BYTES",
    "MAX_REPORT_EPOCHS",
    "RECV_BYTES",
    "WAITING",
    "WRITING",
    "Check",
    "ClientReport",
    "Endpoints",
    "Limits",
    "Reply",
    "check_reply",
    "json_depth",
    "metrics_reply",
]
