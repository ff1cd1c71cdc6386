"""The sampler process (``epochfs sample``): list the remote, fetch it in sampling order into the
node cache, evict, cut.

Along its threads: :mod:`.loop` (the scheduling loop and the download workers), :mod:`.order`
(which key is next), :mod:`.breaker` (remote outages), :mod:`.admitter` (making downloads visible),
:mod:`.progress` (the progress line) and :mod:`.command` (the command around them).
"""

from epochfs.sidecar.sampler.command import run_sample
from epochfs.sidecar.sampler.loop import Sampler

__all__ = ["Sampler", "run_sample"]
