"""Arguments of the torch client that were taken and failed only later, each refused now when it is
given, in words: ``progress=3`` (a TypeError at the first waiting line, minutes into a wait),
``progress_every=0`` (a waiting line at every lookup, 50 a second), a ``sidecar_url`` that is no
http(s) URL (each cut request sent nowhere), a NaN timeout of a loader, and a ``dtype`` numpy does
not know (numpy's "data type not understood", naming no argument). And a loader reading
``torch.bfloat16`` as its uint16 bits says so when a sample holds another dtype (its error named
only uint16). Real folders published like the mount; no sidecar."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, ArraySampleError, EpochLoader, wait_for_epoch
from epochfs.torchclient.plainfolder import publish_epoch
from epochfs.torchclient.startepoch import start_epoch


@pytest.mark.parametrize("kwargs, words", [
    ({"progress": 3}, "progress must be a callable taking one line, or None"),
    ({"progress_every": 0}, "progress_every must be a positive number of seconds"),
    ({"progress_every": -1.5}, "progress_every must be a positive number of seconds"),
    ({"progress_every": float("nan")}, "progress_every must be a positive number of seconds"),
    ({"sidecar_url": "notaurl"}, "sidecar_url must be the sidecar's http(s) URL"),
    ({"sidecar_url": "http://"}, "sidecar_url must be the sidecar's http(s) URL"),
    ({"sidecar_url": 8080}, "sidecar_url must be the sidecar's http(s) URL"),
])
def test_wait_for_epoch_refuses_a_bad_argument_before_any_lookup(tmp_path: Path, kwargs: dict[str, object],
                                                                 words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        wait_for_epoch(tmp_path / "not-there", 0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"progress_every": math.inf, "sidecar_url": None},
                                    {"progress": None, "sidecar_url": "http://127.0.0.1:9"}])
def test_wait_for_epoch_takes_what_it_documents(tmp_path: Path, kwargs: dict[str, object]) -> None:
    publish_epoch(tmp_path / "mnt", 0, {})
    assert wait_for_epoch(tmp_path / "mnt", 0, **kwargs) == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [
    lambda root, **kw: EpochLoader(root, batch_size=2, **kw),
    lambda root, **kw: ArrayLoader(root, batch_size=2, **kw),
    lambda root, **kw: start_epoch(root, **kw),
], ids=["EpochLoader", "ArrayLoader", "start_epoch"])
@pytest.mark.parametrize("kwargs, words", [
    ({"progress": "stderr"}, "progress must be a callable taking one line, or None"),
    ({"timeout": float("nan")}, "timeout must be a positive number of seconds"),
])
def test_the_loaders_refuse_a_bad_progress_or_timeout_when_made(
        tmp_path: Path, make: object, kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        make(tmp_path, **kwargs)  # type: ignore[operator]


def test_an_array_loader_refuses_a_dtype_numpy_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"dtype must be a numpy or torch dtype .* got 'floaty'"):
        ArrayLoader(tmp_path, batch_size=2, format="npy", dtype="floaty")


def test_a_bfloat16_loader_says_it_reads_bits_when_a_sample_holds_another_dtype(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    np.save(objects / "a.npy", np.arange(4, dtype=np.float32))
    publish_epoch(tmp_path / "mnt", 0, {"a.npy": objects / "a.npy"})
    wrong = r"holds float32 \(4,\), but this loader reads uint16"
    with ArrayLoader(tmp_path / "mnt", batch_size=1, format="npy", dtype=torch.bfloat16, shape=(4,),
                     num_threads=1, report=False, progress=None) as loader, \
            pytest.raises(ArraySampleError, match=wrong) as got:
        list(loader.epoch(0))
    assert got.value.__notes__ == [
        "dtype=torch.bfloat16 is read as its bits, uint16: raw files hold them as they are, and a .npy/.npz "
        "holds t.view(torch.int16).numpy().view(np.uint16)"]


def test_the_note_comes_with_a_later_sample_of_another_dtype_too(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    np.save(objects / "a.npy", torch.ones(4, dtype=torch.bfloat16).view(torch.uint16).numpy())
    np.save(objects / "b.npy", np.ones(2, dtype=np.float32))  # the same 8 bytes, another dtype
    publish_epoch(tmp_path / "mnt", 0, {"a.npy": objects / "a.npy", "b.npy": objects / "b.npy"})
    with ArrayLoader(tmp_path / "mnt", batch_size=1, format="npy", dtype=torch.bfloat16, shuffle=False,
                     num_threads=1, report=False, progress=None) as loader:
        batches = loader.epoch(0)
        assert next(iter(batches)).dtype == torch.bfloat16
        wrong = r"b\.npy holds float32 \(2,\), but this loader reads uint16"
        with pytest.raises(ArraySampleError, match=wrong) as got:
            list(batches)
    assert "is read as its bits, uint16" in got.value.__notes__[0]
