"""gcsfs as the ``gs://`` remote (:func:`~.fsspec.open_gcs`) uses it: one try a request, and its
credentials read again when GCS refuses them.

gcsfs retries each request itself, which the downloader does better (:func:`one_try_gcs`). GCS
refuses the credentials themselves with a 401 (an access token revoked or expired), and gcsfs
raises a token it could not renew (google-auth's ``invalid_grant``: a service account's key
deleted) as a 401 too: :class:`~.base.CredentialsRefused` (:func:`~.librules.gcs_kind`), the
remote's as a whole, so the keys are kept, never skipped. What mends it is new credentials: a
Secret rotated in the chart's files mode (``GOOGLE_APPLICATION_CREDENTIALS`` naming a key file the
kubelet rewrites in place). gcsfs reads that file once, as its filesystem is made, and keeps
renewing tokens with the key it read; so after such a refusal :func:`gcs_rereads` has the
credentials made again, by the way gcsfs found them (``google_default``: the file, workload
identity's metadata server...), at most once every :data:`~.s3creds.REREAD_EVERY` seconds however
many downloads meet the refusal (:class:`~.s3creds.CredentialRereads`). Anonymous access has
nothing to read again: GCS's 401 to it (``Anonymous caller does not have ...``) is one object's
denial, skipped (:data:`~.librules.GCS_ANONYMOUS`), never a refusal of credentials. Apart from
:mod:`.fsspec`, which any fsspec filesystem uses, because all of it is gcsfs's.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from epochfs.sidecar.remote.notstore import json_answer
from epochfs.sidecar.remote.s3creds import CredentialRereads

log = logging.getLogger("epochfs.remote")


def read_credentials_again(fs: Any) -> None:
    """Make gcsfs's credentials of ``fs`` again, by the method that found them first: a key file
    is read anew (its token then renewed with the key it holds now), a metadata server asked for a
    new token. The old credentials stay where new ones cannot be made (a file half written, a
    method that no longer works): the next refusal tries again. Anonymous: nothing to read."""
    from gcsfs.core import DEFAULT_PROJECT
    from gcsfs.credentials import GoogleCredentials

    old = fs.credentials
    method = getattr(old, "method", None)
    if old.credentials is None or method in (None, "anon"):
        return
    try:
        # The project the filesystem was made with (open_gcs names none), not the one the first
        # credentials gave: a new key file may name another, which gcsfs would refuse.
        fs.credentials = GoogleCredentials(DEFAULT_PROJECT, old.access, method, on_google=old.on_google)
    except Exception as e:
        log.warning("the GCS credentials (%s) could not be read again: %s; the old ones are kept", method, e)


def gcs_rereads(fs: Any) -> CredentialRereads:
    """What has the credentials of the gcsfs filesystem ``fs`` read again after GCS refuses them,
    at a bounded rate (:func:`read_credentials_again`)."""
    return CredentialRereads(lambda: read_credentials_again(fs))


BUCKET_TYPE_WARNINGS = ("Could not determine bucket type", "lack permissions for storage layout api",
                        "Could not determine if bucket")
"""gcsfs's warnings that it could not learn a bucket's layout from the Storage Control API (no
Google credentials: an emulator, a public bucket), said again at every request it falls back."""


class _OneTryLog(logging.Filter):
    """Drops gcsfs's "out of retries" record, an ERROR with a traceback for every failed request
    of its one try (each 429 among them): the downloader and the listing say what failed, at the
    level it deserves. Lets each bucket-layout warning (:data:`BUCKET_TYPE_WARNINGS`) through once."""

    def __init__(self) -> None:
        super().__init__()
        self._said: set[str] = set()  # a race between two threads lets a second one through at most

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "out of retries on exception" in message:
            return False
        kind = next((kind for kind in BUCKET_TYPE_WARNINGS if kind in message), None)
        if kind is None:
            return True
        first = kind not in self._said
        self._said.add(kind)
        return first


@functools.cache
def one_try_gcs() -> type:
    """gcsfs's filesystem with its own retries off, as :mod:`.s3` switches off botocore's and
    :mod:`.azure` the Azure SDK's: gcsfs tries each request six times, 1 to 32 s apart
    (``retry_request``): 34 s to fail one GET of a server that was down, while the downloader,
    which retries with its own backoff, counts an outage and narrows its window when throttled,
    could do none of it. gcsfs binds the count when its class is made (a decorator on
    ``_request``), so this subclass wraps the undecorated request again with one try (and reads
    its JSON answers with :func:`_call_read_as_json`)."""
    import gcsfs
    from gcsfs.retry import retry_request

    gcs_log = logging.getLogger("gcsfs")
    if not any(isinstance(f, _OneTryLog) for f in gcs_log.filters):
        gcs_log.addFilter(_OneTryLog())
    request = gcsfs.GCSFileSystem._request
    undecorated = getattr(request, "__wrapped__", None)
    if undecorated is None:  # another gcsfs: its own retries stay
        return gcsfs.GCSFileSystem
    return type("OneTryGCSFileSystem", (gcsfs.GCSFileSystem,),
                {"_request": retry_request(retries=1)(undecorated), "_call": _call_read_as_json})


async def _call_read_as_json(self: Any, method: str, path: str, *args: Any, json_out: bool = False,
                             info_out: bool = False, **kwargs: Any) -> Any:
    """gcsfs's ``_call`` (a method of the filesystem: one request, its answer as JSON, as its
    request info, or as headers and body), but an answer read as JSON (a listing page, an
    object's or a bucket's resource) that is a web page or another format than JSON raises
    :class:`~.notstore.NotTheStore` naming the endpoint and its Content-Type, and one that is
    JSON cut short :class:`~.base.Transient` (:func:`~.notstore.json_answer`), where gcsfs's
    ``json.loads`` said only ``Expecting value: line 1 column 1``."""
    status, headers, info, contents = await self._request(method, path, *args, **kwargs)
    if json_out:
        return json_answer(headers, contents, endpoint=self._location, status=status,
                           expected="a GCS JSON API answer")
    return info if info_out else (headers, contents)


__all__ = ["BUCKET_TYPE_WARNINGS", "gcs_rereads", "one_try_gcs", "read_credentials_again"]
