"""The index's named values: every key of the ``meta`` table and the counters that only grow.

Apart from :mod:`.index` so that the schema's migrations (:mod:`.schema`) can name them too.
"""

from __future__ import annotations

from enum import Enum


class Meta(str, Enum):
    """Every key of the ``meta`` table, so a misspelt key is a NameError, not a silent miss."""

    SCHEMA_VERSION = "schema_version"
    CAPACITY = "capacity"
    KEEP_EPOCHS = "keep_epochs"
    MIN_SAMPLES = "min_samples"
    HEADROOM = "headroom"
    IN_USE_SECONDS = "in_use_seconds"
    RETIRE_GRACE = "retire_grace"
    SCHEDULE = "schedule"
    INFLIGHT_BYTES = "inflight_bytes"
    """Bytes reserved by downloads in flight, published by the sampler for status and metrics."""
    INFLIGHT_DOWNLOADED = "inflight_downloaded_bytes"
    """Of those, the bytes the downloads in progress have received so far (the sampler publishes
    it beside :data:`INFLIGHT_BYTES`): a large object's download shows its progress by it."""
    BACKPRESSURE = "backpressure"
    PUBLISH_PAUSED = "publish_paused"
    """Why the folder view's publisher cannot write the folder now (its volume full), while it
    waits for room; absent otherwise. Status, /v1/cut and the metrics read it."""
    CATALOG_OBJECTS = "catalog_objects"
    CATALOG_SKIPS_COUNTED = "catalog_skips_counted"
    """Listing skips already added to ``skipped_total`` (a relisting must not count them twice)."""
    LISTING_GENERATION = "listing_generation"
    """The generation of the listing that is running or last ran (rows it saw carry it)."""
    LISTING_COMPLETE = "listing_complete"
    """The generation of the newest listing that went to the end (absent: none did yet)."""
    LISTING_SOURCE = "listing_source"
    """Where the running listing reads keys: ``list`` or the index URL (a change starts afresh)."""
    LISTING_FAILED = "listing_failed"
    """Why the last listing run failed (one line, redacted), while the listing is tried again;
    removed once a run ends or commits a page (status and status.json show it)."""
    LISTING_PROGRESS = "listing_progress"
    """What the running listing knows (JSON: keys listed and estimated in all, spans reached, the
    first round done, when it began), written with each page; status and the first cut read it."""
    FETCH_OFFERED = "fetch_offered"
    """Snapshot mode: the catalog rowid up to which the pass has offered every row (owed rows are
    after it; :func:`.catalog.refill`), so a restart still fetches the keys owed to the pass."""
    FETCH_CURSOR = "fetch_cursor"
    """Snapshot mode: the rank the pass had offered up to (``front``: a pass starting afresh),
    less the keys handed out and not yet admitted, recorded with :data:`FETCH_OFFERED` at most
    once a second: a restart goes on from it (:mod:`.fetchpass`). Read only beside that record."""
    SAMPLER_REMOTE = "sampler_remote"
    SAMPLER_ENDPOINT = "sampler_endpoint"
    """The endpoint of the store the remote was read from (``--endpoint-url``, or the variable its
    backend reads; "" for the store's own, or a scheme that takes none), redacted and normalized
    (:func:`.urls.same_endpoint`): one bucket name at two endpoints is two datasets."""
    SAMPLER_SEED = "sampler_seed"
    SAMPLER_SHARD = "sampler_shard"
    SIDECAR_TOTALS = "sidecar_totals"
    """The supervisor's own counters (served, client reports), kept across restarts."""
    SIDECAR_RESTARTS = "sidecar_restarts"
    """The supervisor's restarts of each child (JSON: child name -> restarts), kept across its
    restarts; apart from :data:`SIDECAR_TOTALS`, whose keys are the status document's."""
    REPORT_URL = "report_url"
    """The supervisor's client-report URL on the pod's loopback (its ``--health-port``), recorded at
    its start: the views show it in status.json, where the torch client finds the sidecar."""
    OUTAGE = "remote_outage"
    """The running sampler's outage of the remote and its cause (JSON, :mod:`.outage`): written at
    each pause of its outage breaker, removed when the remote answers again and at its start."""
    SAMPLER_RETRYING = "sampler_retrying"
    """The supervisor's sampler retrying an unreachable remote (JSON; :func:`.stats.retry_line`)."""
    INDEX_CHECKED_AT = "index_checked_at"
    """When the last full ``integrity_check`` of this index began (unix time; :mod:`.checkup`)."""
    WRITER_RUNNING = "writer_running"
    """The boot id of the machine the sampler recovered on, until its clean stop (:mod:`.recovery`)."""
    INDEX_CHECK_RESULT = "index_check_result"
    """What it found: "ok", or the damage (then :mod:`.checkmark` forces a repair at the next start)."""


COUNTER_NAMES = (
    "fetched_total",
    "fetched_bytes_total",
    "evicted_total",
    "evicted_bytes_total",
    "skipped_total",
    "failed_total",
    "cuts_total",
    "corrupt_objects_total",
    "repaired_total",
)
"""Counters that only grow; ``cache_bytes`` and ``cache_samples`` are running totals beside them."""
