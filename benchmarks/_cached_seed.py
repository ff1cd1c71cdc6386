"""A cache as the real sampler would have left it after fetching ``cached`` samples of the synthetic
bucket (:mod:`epochfs.benchmarks._synthetic_data`), made in minutes instead of hours, for
:mod:`epochfs.benchmarks.scale_cached`.

Every write goes through the store's own code, so the result is what the store writes, not an
imitation of it:

- **catalog**: the real :class:`~epochfs.sidecar.listing.lister.Lister` with the real
  :class:`~epochfs.sidecar.listing.paged.PagedSource` (folder discovery, one span per class
  folder, page commits with resume points, the generation finished and recorded complete), over an
  in-process remote (:class:`BucketRemote`) whose pages are the endpoint's own
  (:func:`epochfs.benchmarks._synthetic_xml.list_page`) without HTTP or XML. The sidecar started on
  the cache then finds a complete listing of the same source (``list``) and lists nothing;
- **samples**: the ``cached`` keys first in the sampling order (the lowest ranks: what a sampler
  fetching in rank order has after ``cached`` fetches, with nothing evicted), each body written to a
  temp file and admitted in batches with :meth:`Store.admit` (journal, read-only rename into
  ``objects/ab/<sid>``, directory fsync, rows with their catalog rank and running totals). A batch's
  fields are the downloader's for an S3 object whose ETag is the body's md5: ``checksum`` and
  ``digest`` ``md5:<etag>``, ``verified`` ``etag-md5``, ``version`` the ETag;
- **the writer's life**: :meth:`Store.recover` first (the recovery journal made, as a sampler's
  first start does), the sampler's identity recorded (``--remote s3://bench``, ``--seed 0``, shard
  ``0/1``), epoch 0 cut at the end over what fits its budget, the full index check run and
  recorded (:meth:`Store.check_index`: a sampler running for a while has one from the last 6 h),
  then :meth:`Store.close` (a clean stop: journal flushed, the writer's mark cleared).

Object files are not fsynced (the index is; a crash while seeding means seeding again). Bodies are
``size`` bytes: small (a few hundred bytes), so a million of them fit a scratch folder.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from epochfs.benchmarks._synthetic_data import Bucket, Dataset
from epochfs.benchmarks._synthetic_xml import list_page
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.remote import ListedPage, RemoteObject
from epochfs.sidecar.store import Admission, Meta, Policy, Store

REMOTE = "s3://bench"
"""The remote the sidecar is given (the synthetic endpoint's bucket); recorded as the sampler's."""
SEED = 0
"""The sampler's default ``--seed``."""
BATCH = 5000
"""Samples per :meth:`Store.admit` (one journal write, one index transaction)."""

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class BucketRemote:
    """The synthetic bucket's ListObjectsV2 pages in process: what ``S3Remote.list_page`` returns
    against the endpoint serving the same :class:`Dataset`, without the HTTP round trip."""

    url = REMOTE
    """The bucket it stands in for (a :class:`~epochfs.sidecar.remote.PagedRemote` names it in errors)."""

    def __init__(self, data: Bucket) -> None:
        self.data = data
        self.pages = 0

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000
                  ) -> ListedPage:
        resume = token if token is not None else (start_after + "\x00" if start_after else "")
        keys, prefixes, nxt = list_page(self.data, prefix=prefix, delimiter="/" if delimiter else "",
                                        resume=resume, max_keys=max_keys)
        self.pages += 1
        return ListedPage([RemoteObject(k, self.data.size, self.data.etag(k)) for k in keys], prefixes,
                          nxt, truncated=nxt is not None)


def seed(cache: Path, data: Dataset, cached: int, *, capacity: int,
         progress: Progress = _stderr, every: float = 5.0) -> dict[str, float]:
    """Make ``cache`` (a new folder) hold a complete catalog of ``data`` and its first ``cached``
    keys in the sampling order as samples, epoch 0 cut; returns seconds per step."""
    if cached > data.count:
        raise ValueError(f"{cached} cached samples from a bucket of {data.count} keys")
    steps: dict[str, float] = {}
    store = Store(cache, create=True)
    try:
        store.set_meta(Meta.SAMPLER_REMOTE, REMOTE)
        store.set_meta(Meta.SAMPLER_SEED, str(SEED))
        store.set_meta(Meta.SAMPLER_SHARD, "0/1")
        store.recover(integrity="ok")  # a new, empty index: the journal is made here
        policy = Policy(capacity=capacity, keep_epochs=2, min_samples=1)
        store.configure(policy)

        started = time.perf_counter()
        remote = BucketRemote(data)
        # The sampler's object limit (its policy's epoch budget): the listing recorded is the one a
        # sampler with that --capacity takes as its own, and lists nothing again.
        lister = Lister(store, PagedSource(remote), seed=SEED, threads=1, object_limit=policy.epoch_budget,
                        progress_every=max(1, min(data.count // 10, 1_000_000)))
        last = [started]

        def listed(report: object) -> None:
            now = time.perf_counter()
            if now - last[0] >= every:
                last[0] = now
                progress(f"  catalog: {getattr(report, 'listed', 0):,} of {data.count:,} keys "
                         f"({now - started:.0f}s)")

        lister.on_page = listed
        report = lister.run()
        if not report.complete or report.total != data.count:
            raise RuntimeError(f"the catalog listing ended short: {report}")
        steps["catalog_s"] = time.perf_counter() - started
        progress(f"  catalog: {report.total:,} keys in {steps['catalog_s']:.1f}s ({remote.pages} pages)")

        started = time.perf_counter()
        admit(store, data, cached, progress=progress, every=every)
        steps["samples_s"] = time.perf_counter() - started

        started = time.perf_counter()
        if store.cut(0, force=True) != 0:
            raise RuntimeError("epoch 0 was not cut")
        steps["cut_s"] = time.perf_counter() - started
        started = time.perf_counter()
        result = store.check_index(full_below=1 << 62)
        if result != "ok":
            raise RuntimeError(f"the seeded index failed its check: {result}")
        steps["check_s"] = time.perf_counter() - started
    finally:
        store.close()
    return steps


def admit(store: Store, data: Dataset, cached: int, *, progress: Progress = _stderr,
          every: float = 5.0) -> None:
    """Fetch the first ``cached`` keys in the sampling order, from ``data`` instead of a remote,
    through :meth:`Store.admit` in batches of :data:`BATCH`."""
    started = last = time.perf_counter()
    done = 0
    after: int | None = None
    while done < cached:
        rows = store.candidates(after_rank=after, limit=min(BATCH, cached - done))
        if not rows:
            raise RuntimeError(f"the catalog ran out after {done} samples")
        after = rows[-1][0]
        batch = []
        for _, cand in rows:
            body = data.body(cand.key)
            etag = hashlib.md5(body).hexdigest()
            temp = store.temp_path()
            with open(temp, "wb") as f:
                f.write(body)
            batch.append(Admission(cand.key, cand.sid, len(body), f"md5:{etag}", etag, temp,
                                   digest=f"md5:{etag}", verified="etag-md5"))
        store.admit(batch)
        done += len(batch)
        now = time.perf_counter()
        if now - last >= every or done == cached:
            last = now
            progress(f"  samples: {done:,} of {cached:,} ({done / max(now - started, 1e-9):,.0f}/s)")


__all__ = ["REMOTE", "SEED", "BucketRemote", "admit", "seed"]
