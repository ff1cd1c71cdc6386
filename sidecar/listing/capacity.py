"""The check a complete listing answers: a catalog that is empty because every object is larger
than the cache allows is a refused setting (exit 2), not a dataset to wait on."""

from __future__ import annotations

import logging

from epochfs.sidecar.config import ConfigError, SamplerSettings, format_size
from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.redact import redact
from epochfs.sidecar.store.prefixfix import prefix_fix
from epochfs.sidecar.store.stats import empty_shard_words, percent

log = logging.getLogger("epochfs.sampler")


def check_capacity(settings: SamplerSettings, report: CatalogReport) -> None:
    """After a complete listing: an empty catalog because every object is too large is a bad
    setting (the listing thread stops the sampler; the command exits 2); an empty one otherwise
    is a warning (a mistyped prefix, or objects not uploaded yet: status and /readyz say it too)."""
    if report.total == 0 and report.too_large == 0:
        fix = ("--include/--exclude left out every key" if report.excluded
               else prefix_fix(redact(settings.remote)))
        again = (f"; listing again every {settings.relist_interval:.0f}s" if settings.relist_interval
                 else "; epochfs relist lists it again")
        # The prefix is right when other shards' objects were listed: this node's shard is empty.
        shard = None if report.excluded or report.in_shard else empty_shard_words(
            redact(settings.remote), f"{settings.shard_index}/{settings.shard_count}", report.listed)
        if shard is not None:
            log.warning("%s (%s)%s", shard, report, again)
        else:
            log.warning("0 objects under %s for this node (%s): %s%s", redact(settings.remote), report,
                        fix, again)
    if report.total == 0 and report.too_large > 0:
        limit_flag = (
            "--max-object-size"
            if settings.max_object_size is not None and settings.object_limit == settings.max_object_size
            else "--capacity"
        )
        raise ConfigError(
            f"{limit_flag}: every object of this shard is larger than the object limit "
            f"{format_size(settings.object_limit)} (capacity {format_size(settings.capacity)}, "
            f"headroom {percent(settings.headroom)}); the smallest is {format_size(report.smallest_refused)}"
        )


__all__ = ["check_capacity"]
