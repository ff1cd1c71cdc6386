"""The remote side: a dataset's store listed as a stream and read one object at a time.

One package (docs/architecture.md draws it):

- :mod:`.base`: the interface (:class:`Remote`, :class:`Reader`, :class:`RemoteObject`, every
  capability declared) and the typed failures;
- :mod:`.errors`: exceptions translated into those failures, by the rules of :mod:`.librules`
  (one per client library);
- :mod:`.registry`: scheme -> backend, :func:`open_remote`, the accepted schemes and help text;
- a module per backend: :mod:`.s3` (botocore, with :mod:`.s3read`, :mod:`.s3list`, the pool :mod:`.httpget`,
  its connections :mod:`.httpconn` and proxies :mod:`.httpproxy`), :mod:`.httpindex`
  (``http(s)://`` with an index file), :mod:`.fsspec` (``gs://``), :mod:`.azure` (``az://``,
  ``abfs(s)://``: adlfs through :mod:`.fsspec`), :mod:`.file`;
- :mod:`.checksums`: what a store's ETags and stored checksums vouch for;
- :mod:`.testing`: an in-memory remote that injects failures, for tests and benchmarks.

The names below are the public ones; importing this package loads neither a backend nor a
client library (:mod:`.registry` imports a backend's module when a URL of its scheme is opened).
"""

from epochfs.sidecar.remote.base import (
    BLOCK,
    Changed,
    Denied,
    ListedPage,
    NotFound,
    PagedRemote,
    PassOver,
    Reader,
    Remote,
    RemoteError,
    RemoteFailure,
    RemoteObject,
    Throttled,
    Transient,
    Unavailable,
)
from epochfs.sidecar.remote.registry import SCHEMES, open_remote

__all__ = [
    "BLOCK",
    "SCHEMES",
    "Changed",
    "Denied",
    "ListedPage",
    "NotFound",
    "PagedRemote",
    "PassOver",
    "Reader",
    "Remote",
    "RemoteError",
    "RemoteFailure",
    "RemoteObject",
    "Throttled",
    "Transient",
    "Unavailable",
    "open_remote",
]
