"""An ``http(s)://`` remote whose objects cannot be reached mid-run (connections cut without an
answer) is an outage, as any store's: the sampler pauses, keeps the keys, and fetches them once
the server answers again. fsspec reports such a failure as FileNotFoundError, and every key was
skipped for good as not found (a dataset dropped from the catalog by a brief outage). A server
that never answers is an outage too, and an object that redirects to itself a redirect loop, said
so, never a key gone. And a body that trickles is cut, as an S3 body is. A real ``epochfs sample``
against a real local HTTP server that serves its index and cuts every object GET while it is
down, hangs, redirects, or trickles each body."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from common import random_objects, wait_until
from sampler_helpers import running_sampler


class Server:
    """Serves ``index.txt`` and the objects of a dict; while ``down``, every object GET and HEAD
    is cut (the connection closed without an answer), as a server that is going away does; with
    ``hang``, every object request is read and never answered; with ``loop``, every object
    redirects to itself (and the index too with ``loop_index``); with ``trickle``, each body is
    sent a byte at a time, five a second."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.down = True
        self.hang = self.loop = self.loop_index = self.trickle = False
        index = "".join(f"{k}\t{len(v)}\n" for k, v in sorted(objects.items())).encode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _answer(self, body: bool) -> None:
                key = self.path.removeprefix("/data/")
                if key == "index.txt" and not server.loop_index:
                    data = index
                elif server.hang:  # read until the client leaves; never answered
                    self.rfile.read()
                    self.close_connection = True
                    return
                elif server.loop or server.loop_index:
                    self.send_response(302)
                    self.send_header("Location", self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                elif server.down:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                elif key in server.objects:
                    data = server.objects[key]
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body and server.trickle and key != "index.txt":
                    try:
                        for i in range(len(data)):  # a byte every 0.2 s, until the client leaves
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(0.2)
                    except OSError:
                        return
                elif body:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def objects() -> dict[str, bytes]:
    return {f"d/{k}": v for k, v in random_objects(12, 2_000).items()}


@pytest.fixture
def server(objects: dict[str, bytes]) -> Iterator[Server]:
    s = Server(objects)
    try:
        yield s
    finally:
        s.close()


def test_an_http_remote_that_is_down_keeps_its_keys(tmp_path: Path, server: Server,
                                                    objects: dict[str, bytes]) -> None:
    cache = tmp_path / "cache"
    with running_sampler(cache, server.url, "--retries", "1", "--concurrency", "2",
                         env={"EPOCHFS_READ_TIMEOUT": "1"}) as sp:
        wait_until(lambda: "remote unavailable" in sp.log_text(), what="the outage noticed")
        assert sp.stats()["skipped_total"] == 0, sp.log_text()[-3000:]
        server.down = False
        wait_until(lambda: sp.stats()["samples"] == len(objects), what="every object after the outage")
        assert "remote reachable again" in sp.log_text()
        assert sp.stats()["skipped_total"] == 0


def test_an_http_remote_that_never_answers_keeps_its_keys(tmp_path: Path, server: Server) -> None:
    """A server that accepts each connection and never answers (a hung proxy) times out under
    fsspec's not found: the keys are held for the outage breaker, none skipped as gone."""
    server.down, server.hang = False, True
    cache = tmp_path / "cache"
    with running_sampler(cache, server.url, "--retries", "1", "--concurrency", "2",
                         env={"EPOCHFS_READ_TIMEOUT": "0.5"}) as sp:
        wait_until(lambda: "holding 'd/" in sp.log_text(), what="a key held, not skipped")
        assert "Unavailable" in sp.log_text()
        assert sp.stats()["skipped_total"] == 0, sp.log_text()[-3000:]


def test_an_http_object_that_redirects_to_itself_is_skipped_as_a_loop(
        tmp_path: Path, server: Server, objects: dict[str, bytes]) -> None:
    """An object that redirects to itself is retried, then skipped as a redirect loop, said so,
    not as gone: under fsspec's not found lies aiohttp's TooManyRedirects."""
    server.down, server.loop = False, True
    cache = tmp_path / "cache"
    with running_sampler(cache, server.url, "--retries", "2", "--concurrency", "4") as sp:
        wait_until(lambda: sp.stats()["skipped_total"] == len(objects), what="every object given up on")
    log = sp.log_text()
    assert "Transient: TooManyRedirects: 10 redirects from " in log, log[-3000:]
    assert "(a redirect loop)" in log
    assert "NotFound" not in log


def test_an_http_index_that_redirects_to_itself_is_refused_at_the_start(tmp_path: Path,
                                                                        server: Server) -> None:
    """At the start a redirect loop is a URL to fix, not a remote that may answer later: exit 2
    with one line that says so, never 75 (which has the sidecar started again for ever)."""
    server.down, server.loop_index = False, True
    run = subprocess.run([str(Path(sys.executable).with_name("epochfs")), "sample", "--remote", server.url,
                          "--cache", str(tmp_path / "cache"), "--capacity", "1Mi", "--read-timeout", "2"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "index.txt without an answer (a redirect loop); check --remote" in run.stderr


def test_a_trickling_http_body_is_cut(tmp_path: Path, server: Server) -> None:
    """A body sent at 5 bytes a second (a slow-loris proxy) is cut once a window of
    ``--read-timeout`` brings less than the floor, as an S3 body is: the reads of an fsspec
    stream each count, where a body shorter than the buffer was one read, never cut."""
    server.down, server.trickle = False, True
    cache = tmp_path / "cache"
    with running_sampler(cache, server.url, "--concurrency", "2", env={"EPOCHFS_READ_TIMEOUT": "1"}) as sp:
        wait_until(lambda: "stalled" in sp.log_text(), what="a trickling download cut")
    assert "abandoned, retried" in sp.log_text()
