"""A training loop for tests/torchclient/test_resume.py, run as its own process so it can be killed.

``python resume_train.py ROOT CKPT LOG KIND RANK WORLD [PAUSE_AFTER]``: reads the epoch a checkpoint
points into (``loader.next_epoch``; 0 without one) with ``ArrayLoader`` or ``EpochLoader`` (KIND),
as rank RANK of WORLD; after each batch it appends the batch's sample ids to LOG and then writes
``loader.state_dict()`` to CKPT (atomically: a checkpoint is whole or absent). After PAUSE_AFTER
batches it prints "paused" and blocks on stdin, so the test kills it at a known point mid-epoch.
"""

from __future__ import annotations

import os
import sys

import torch

from epochfs.torchclient import ArrayLoader, EpochLoader


def main(root: str, ckpt: str, log: str, kind: str, rank: int, world: int, pause_after: int) -> None:
    common = dict(batch_size=5, num_replicas=world, rank=rank, report=False, progress=None, wait=False)
    if kind == "array":
        loader: ArrayLoader | EpochLoader = ArrayLoader(root, format="raw", dtype="int32", shape=(1,),
                                                        num_threads=2, **common)
    else:
        loader = EpochLoader(root, num_workers=0, decode="bytes", **common)
    if os.path.exists(ckpt):
        loader.load_state_dict(torch.load(ckpt))
    epoch = loader.next_epoch
    with loader, open(log, "a", encoding="utf-8") as out:
        for number, batch in enumerate(loader.epoch(epoch), start=1):
            ids = batch.contiguous().view(torch.int32).view(-1).tolist()
            out.write(f"{epoch}\t{' '.join(map(str, ids))}\n")
            out.flush()
            tmp = ckpt + ".tmp"
            torch.save(loader.state_dict(), tmp)
            os.replace(tmp, ckpt)
            if number == pause_after:
                print("paused", flush=True)
                sys.stdin.read()  # the test kills this process here
    print("done", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    pause = int(args[6]) if len(args) > 6 else -1
    main(args[0], args[1], args[2], args[3], int(args[4]), int(args[5]), pause)
