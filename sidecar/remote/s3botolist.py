"""botocore's ``ListObjectsV2`` answers read to :data:`~.s3fastlist.MAX_PAGE_BYTES` at most, as the
presigned listing's are (:func:`~.s3fastlist.read_page`).

botocore reads a whole answer into memory before any hook sees it (its HTTP session joins every
block of the body), so a store that streams a page without end, listed by botocore (it refused the
presigned listing), would take the process's memory. The client's ``before-send`` hook of
``ListObjectsV2`` sends the request itself through the client's own HTTP session (its proxies, its
CA bundle, its timeouts), asks it to leave the body unread, and reads it here to the cap; past it
the page fails as :class:`~.base.Transient`, and the listing asks it again as any failed page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from epochfs.sidecar.remote.base import Transient
from epochfs.sidecar.remote.s3fastlist import PageTooLarge, read_page


class _Read:
    """A body read already, as botocore's response reads its ``raw`` (:meth:`stream`)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, *_: object, **__: object) -> Iterator[bytes]:
        yield self.body


def bound_list_answers(client: Any) -> None:
    """Have ``client`` read each ``ListObjectsV2`` answer to the cap (why: this module's docstring).
    ``client._endpoint.http_session`` is botocore's own session of that client: the one place its
    transport, proxies and TLS included, can be used without reading the body whole."""
    session = client._endpoint.http_session

    def send(request: Any, **_: object) -> Any:
        from botocore import exceptions as bce
        from botocore.awsrequest import AWSResponse
        from urllib3.exceptions import ProtocolError
        from urllib3.exceptions import ReadTimeoutError as URLLib3ReadTimeout

        streamed = request.stream_output
        request.stream_output = True  # the session leaves the body unread: read below, to the cap
        try:
            response = session.send(request)
        finally:
            request.stream_output = streamed
        raw = response.raw
        try:
            body = read_page(raw.read)
        except PageTooLarge as e:
            raw.close()  # the rest unread: the connection is not given back
            raise Transient(f"list {request.url.partition('?')[0]}: {e}") from None
        except URLLib3ReadTimeout as e:  # as botocore's session words what it reads itself
            raise bce.ReadTimeoutError(endpoint_url=request.url, error=e) from e
        except ProtocolError as e:
            raise bce.ConnectionClosedError(error=e, request=request, endpoint_url=request.url) from e
        raw.release_conn()
        return AWSResponse(response.url, response.status_code, response.headers, _Read(body))

    client.meta.events.register("before-send.s3.ListObjectsV2", send)


__all__ = ["bound_list_answers"]
