"""One rank of ``test_start_epoch_warm.test_ranks_agree_on_the_largest_start`` (started by
:func:`two_ranks.run_two_ranks`): each rank a node of its own whose cache is at another epoch.

A script of its own, importing only the client: the test module imports the sidecar test helpers,
which a rank's process (started outside pytest) does not find."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path


def main(rank: int, base: str) -> None:
    """Write this rank's own newest epoch and the one every rank agreed on to ``rank<N>.json``."""
    import torch.distributed as dist

    from epochfs.torchclient import start_epoch
    from epochfs.torchclient.startepoch import newest_live_epoch

    dist.init_process_group("gloo", init_method=f"file://{base}/store", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    try:
        root = f"{base}/node{rank}"
        out = {"own": newest_live_epoch(root), "agreed": start_epoch(root)}
    finally:
        dist.destroy_process_group()
    Path(f"{base}/rank{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
