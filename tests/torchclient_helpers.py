"""Shared by the torch-client tests: a folder whose epochs grow, the growing-epochs check, a report
collector, and the decoders the loader tests hand to worker processes."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import torch
from digest_helpers import checksum_like

from epochfs.torchclient import EpochLoader, EpochStats, decode_bytes, read_manifest
from epochfs.torchclient.plainfolder import publish_epoch


def check_loader_over_growing_epochs(root: str | os.PathLike[str], *, epochs: tuple[int, ...] = (0, 1, 2),
                                     num_workers: int = 2, batch_size: int = 3,
                                     progress: Callable[[str], None] | None = None,
                                     events: list[tuple[str, int]] | None = None) -> list[EpochStats]:
    """Read ``epochs`` through one EpochLoader and check every byte of every file against its manifest.

    Checks: each epoch delivers each of its files exactly once (world of one), the bytes' md5 equals
    the manifest checksum, the stats count them, and the same worker processes serve every epoch.
    ``events`` (if given) receives ("batch", n) for every batch as it arrives.
    """
    loader = EpochLoader(root, batch_size=batch_size, num_workers=num_workers, decode=path_pid_bytes,
                         collate_fn=keep_list, progress=progress, timeout=120)
    decoded_by: set[int] = set()
    worker_sets: list[set[int]] = []
    try:
        for epoch in epochs:
            run = loader.epoch(epoch)
            seen: Counter[str] = Counter()
            pids: set[int] = set()
            base = Path(root) / f"epoch-{epoch}"
            expected: dict[str, str] = {}
            for batch in run:
                if not expected:
                    assert run.dataset is not None and run.dataset.checksums is not None
                    expected = dict(zip(run.dataset.files, run.dataset.checksums, strict=True))
                if events is not None:
                    events.append(("batch", epoch))
                for path, pid, data in batch:
                    rel = Path(path).relative_to(base).as_posix()
                    seen[rel] += 1
                    pids.add(pid)
                    assert checksum_like(expected[rel], data.numpy().tobytes()) == expected[rel], rel
            manifest = read_manifest(root, epoch)
            assert manifest is not None, f"epoch {epoch} has no manifest"
            assert seen == Counter(e.path for e in manifest.entries), f"epoch {epoch}: every file once"
            stats = loader.history[-1]
            assert (stats.epoch, stats.samples, stats.bytes, stats.complete) == (
                epoch, len(manifest.entries), manifest.total_bytes, True)
            decoded_by |= pids
            if num_workers:
                # The DataLoader's own worker processes: the same every epoch.
                worker_sets.append(set(loader.worker_pids()))
    finally:
        loader.close()
    if num_workers:
        assert len(worker_sets[0]) == num_workers and decoded_by <= worker_sets[0], "decoding is in workers"
        assert all(s == worker_sets[0] for s in worker_sets), "every epoch runs on the same worker processes"
    return loader.history


class GrowingFolder:
    """A stand-in sidecar: epoch n holds the first ``sizes[n]`` objects; it cuts an epoch when asked.

    Asking is the loader's first miss (its progress line), as the lookup of epoch-N is on the mount.
    """

    def __init__(self, root: Path, objects: Path, sizes: list[int]) -> None:
        self.root, self.objects, self.sizes = root, objects, sizes
        self.asked: list[int] = []
        self.cut_next = threading.Event()
        self.stop = False
        self.thread = threading.Thread(target=self._run)

    def publish(self, epoch: int) -> None:
        names = sorted(os.listdir(self.objects))[: self.sizes[epoch]]
        publish_epoch(self.root, epoch, {f"part-{n[:2]}/{n}": self.objects / n for n in names})

    def progress(self, line: str) -> None:
        self.asked.append(int(line.split("waiting for epoch ")[1].split()[0]))
        self.cut_next.set()

    def _run(self) -> None:
        published = {0}
        while not self.stop:
            if not self.cut_next.wait(0.5):
                continue
            self.cut_next.clear()
            for epoch in self.asked:
                if epoch not in published:
                    self.publish(epoch)
                    published.add(epoch)

    def __enter__(self) -> GrowingFolder:
        self.publish(0)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop = True
        self.thread.join()


class Collector:
    """A small HTTP server that records every JSON body posted to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.epochs: set[int] = set()
        """The epochs the reports named (``?epoch=N``)."""
        self._named = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                path, _, query = self.path.partition("?")
                assert path == "/v1/client-report"  # ?epoch=N names the epoch read
                length = int(self.headers["Content-Length"])
                collector.bodies.append(json.loads(self.rfile.read(length)))
                with collector._named:
                    collector.epochs.update(int(v) for v in parse_qs(query).get("epoch", []))
                    collector._named.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/client-report"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def total(self, field: str) -> float:
        return sum(b[field] for b in self.bodies)

    def wait_named(self, epoch: int, *, timeout: float) -> bool:
        """Whether a report named ``epoch`` within ``timeout`` seconds."""
        with self._named:
            return self._named.wait_for(lambda: epoch in self.epochs, timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def path_pid_bytes(path: str) -> tuple[str, int, torch.Tensor]:
    """Decoder for the check: which file, which worker process, and its bytes as the loader read them."""
    return path, os.getpid(), decode_bytes(path)


def keep_list(batch: list) -> list:
    return batch
