"""examples/lightning_datamodule.py with a real Lightning Trainer (CPU): a fresh epoch each training
epoch, and a fit resumed from a mid-epoch checkpoint reading exactly the rest of that epoch.

Also ``EpochStream`` alone, the piece that works without Lightning.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, EpochStream
from epochfs.torchclient.layout import read_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_datamodule.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("lightning_datamodule_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _firsts(root: Path, epoch: int) -> Counter[float]:
    """The first value of each sample of ``epoch-<epoch>`` (what MeanModel records), as a multiset."""
    manifest = read_manifest(root, epoch)
    assert manifest is not None
    return Counter(float(np.load(root / f"epoch-{epoch}" / p)[0]) for p in manifest.paths)


def _seen(model: Any, epoch: int) -> Counter[float]:
    return Counter(v for e, values in model.seen if e == epoch for v in values)


def test_epoch_stream_is_a_fresh_epoch_each_iteration(tmp_path: Path) -> None:
    example = _example()
    root = example.generate(tmp_path, 40, 4, 8)
    loader = ArrayLoader(root, batch_size=3, report=False, progress=None, copy=True)
    epoch = [0]
    stream = EpochStream(loader, lambda: epoch[0])
    with loader:
        for n in range(4):
            epoch[0] = n
            assert len(stream) == -(-10 * (n + 1) // 3)
            seen = Counter(float(v) for batch in stream for v in batch[:, 0].tolist())
            assert seen == _firsts(root, n), f"epoch {n}"
            assert loader.history[-1].epoch == n
        state = stream.state_dict()
        assert (state["epoch"], state["complete"]) == (3, True)
    follow = EpochStream(ArrayLoader(root, batch_size=3, report=False, progress=None))
    follow.load_state_dict(dict(state, epoch=1))
    assert follow.epoch == 2, "without an epoch_fn: the loader's next_epoch"


if importlib.util.find_spec("lightning") is None:
    pytest.skip("lightning is not installed (pip install lightning)", allow_module_level=True)


@functools.cache
def _lightning() -> Any:
    """``lightning`` as the example imports it (its import_lightning: the dev extra's torchvision is
    a CUDA build whose operators do not register beside the CPU torch), so this test runs what the
    docs run. Imported by the test, not at collection, where every pytest worker paid its ~3 s of
    CPU (lightning, torchmetrics, torchvision's models) for one test."""
    return _example().import_lightning()


def _stop_at(step: int, path: Path) -> Any:
    """A callback that saves a checkpoint after global step ``step`` (mid-epoch), then stops the fit
    as a crash would."""

    class _StopAt(_lightning().Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == step:
                trainer.save_checkpoint(path)
                raise RuntimeError("stopped mid-epoch by the test")

    return _StopAt()


def _trainer(epochs: int, callbacks: list[Any] | None = None) -> Any:
    return _lightning().Trainer(max_epochs=epochs, reload_dataloaders_every_n_epochs=1, accelerator="cpu",
                                devices=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                callbacks=callbacks or [])


def test_lightning_fit_reads_epoch_n_in_training_epoch_n_and_resumes_mid_epoch(tmp_path: Path) -> None:
    example = _example()
    root = example.generate(tmp_path, 60, 3, 8)  # epochs of 20, 40, 60 samples
    datamodule, module = example.datamodule_class(), example.module_class()

    model = module(8)
    _trainer(3).fit(model, datamodule=datamodule(root, 6, report=False, progress=None))
    for epoch in range(3):
        assert _seen(model, epoch) == _firsts(root, epoch), f"training epoch {epoch} read epoch-{epoch} whole"

    # Crash in epoch 1 after its third batch (global step 4 of 4 + 7), resume from the checkpoint.
    ckpt = tmp_path / "mid.ckpt"
    crashed = module(8)
    with pytest.raises(RuntimeError, match="stopped mid-epoch"):
        _trainer(3, [_stop_at(4 + 3, ckpt)]).fit(crashed, datamodule=datamodule(root, 6, report=False,
                                                                                progress=None))
    assert os.path.exists(ckpt) and torch.load(ckpt, weights_only=False)["epoch"] == 1
    resumed = module(8)
    _trainer(3).fit(resumed, datamodule=datamodule(root, 6, report=False, progress=None), ckpt_path=ckpt)
    before, after = _seen(crashed, 1), _seen(resumed, 1)
    assert sum(before.values()) == 18 and not before & after, "nothing read before the checkpoint again"
    assert before + after == _firsts(root, 1), "epoch 1 whole across the crash"
    assert _seen(resumed, 2) == _firsts(root, 2) and not _seen(resumed, 0)
