"""ArrayLoader: fixed-shape arrays read by threads into reused batch tensors, with EpochLoader's epochs.

Real files in plain folders laid out like the mount (``publish_epoch``), and one run through a real
sidecar mount. Values are checked against ``np.load`` of each file, the order against
``EpochSampler``, the batch plan against ``EpochLoader``'s; the rank split is also checked as a pure
function over many world sizes, and with two gloo ranks for equal batch counts.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from common import TESTS, S3Server, put_objects
from sidecar_helpers import running_sidecar
from torchclient_helpers import Collector, GrowingFolder

from epochfs.torchclient import ArrayLoader, ArraySampleError, EpochLoader, EpochSampler
from epochfs.torchclient.epochplan import plan_batches
from epochfs.torchclient.plainfolder import publish_epoch


def _publish(tmp_path: Path, files: dict[str, Callable[[Path], object]], epochs: dict[int, list[str]],
             name: str = "mnt") -> Path:
    """Write each object with its writer under objects/, then publish epochs of symlinks to them."""
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    for rel, write in files.items():
        write(objects / rel)
    root = tmp_path / name
    for epoch, names in epochs.items():
        publish_epoch(root, epoch, {f"train/{n}": objects / n for n in names})
    return root


def _npy(array: np.ndarray, version: tuple[int, int] | None = None) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "wb") as handle:
            np.lib.format.write_array(handle, array, version=version)
    return write


def _npz(compressed: bool = False, **arrays: np.ndarray) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "wb") as handle:
            (np.savez_compressed if compressed else np.savez)(handle, **arrays)
    return write


def _raw(array: np.ndarray) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(array.tobytes())


def _sampler_order(dataset: object, *, epoch: int, seed: int, num_replicas: int = 1, rank: int = 0,
                   shuffle: bool = True) -> list[int]:
    sampler = EpochSampler(dataset, num_replicas=num_replicas, rank=rank, seed=seed,  # type: ignore[arg-type]
                           shuffle=shuffle)
    sampler.set_epoch(epoch)
    return list(sampler)


def _loader(root: Path, **kwargs: object) -> ArrayLoader:
    kwargs = {"batch_size": 3, "num_threads": 3, "progress": None, "report": False, **kwargs}
    return ArrayLoader(root, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ values
RNG = np.random.default_rng(7)
NPY_ARRAYS = {f"{i:02d}.npy": RNG.standard_normal((3, 5)).astype(np.float32) for i in range(11)}
NPZ_ARRAYS = {f"{i:02d}.npz": RNG.integers(0, 2**40, (2, 4), dtype=np.int64) for i in range(11)}
RAW_ARRAYS = {f"{i:02d}.bin": RNG.integers(-(2**15), 2**15, (4, 6), dtype=np.int16) for i in range(11)}


def _npy_files() -> dict[str, Callable[[Path], object]]:
    files: dict[str, Callable[[Path], object]] = {n: _npy(a) for n, a in NPY_ARRAYS.items()}
    files["07.npy"] = _npy(NPY_ARRAYS["07.npy"], version=(2, 0))  # other header bytes, same array
    return files


def _npz_files() -> dict[str, Callable[[Path], object]]:
    files: dict[str, Callable[[Path], object]] = {
        n: _npz(label=np.array([i]), x=a, after=np.zeros(3)) for i, (n, a) in enumerate(NPZ_ARRAYS.items())}
    files["04.npz"] = _npz(label=np.arange(9), x=NPZ_ARRAYS["04.npz"])  # x further into the zip
    files["05.npz"] = _npz(x=NPZ_ARRAYS["05.npz"], label=np.array([5]))  # x first
    return files


KINDS: dict[str, tuple[Callable[[], dict[str, Callable[[Path], object]]], Callable[[Path], np.ndarray],
                       dict[str, object]]] = {
    "npy": (_npy_files, lambda p: np.load(p), {}),
    "npz": (_npz_files, lambda p: np.load(p)["x"], {"member": "x"}),
    "raw": (lambda: {n: _raw(a) for n, a in RAW_ARRAYS.items()},
            lambda p: np.fromfile(p, dtype=np.int16).reshape(4, 6), {"dtype": "int16", "shape": (4, 6)}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_value_of_every_sample_equals_np_load(tmp_path: Path, kind: str) -> None:
    make, load, options = KINDS[kind]
    files = make()
    names = sorted(files)
    root = _publish(tmp_path, files, {0: names[:6], 1: names})
    with _loader(root, seed=5, **options) as loader:
        for epoch in (0, 1):
            run = loader.epoch(epoch)
            rows: list[np.ndarray] = []
            for batch in run:
                assert batch.shape[1:] == load(tmp_path / "objects" / names[0]).shape
                rows += [row.numpy().copy() for row in batch]  # the batch is valid until the next one
            assert run.dataset is not None
            order = _sampler_order(run.dataset, epoch=epoch, seed=5)
            assert len(rows) == len(order) == len(run.dataset)
            for row, index in zip(rows, order, strict=True):
                expected = load(run.dataset.path(index))
                assert row.dtype == expected.dtype and np.array_equal(row, expected), run.dataset.path(index)
            stats = loader.history[-1]
            assert (stats.epoch, stats.samples, stats.files) == (epoch, len(order), len(order))
            assert stats.complete
            assert stats.bytes == sum(run.dataset.sizes)


@pytest.mark.parametrize("dtype, shape", [(np.uint8, (7,)), (np.float64, ()), (np.bool_, (2, 3)),
                                          (np.complex64, (3,)), (np.float16, (2, 2, 2))])
def test_dtypes_and_shapes(tmp_path: Path, dtype: type, shape: tuple[int, ...]) -> None:
    arrays = {f"{i}.npy": np.asarray(RNG.standard_normal(shape) * 10).astype(dtype) for i in range(5)}
    root = _publish(tmp_path, {n: _npy(a) for n, a in arrays.items()}, {0: sorted(arrays)})
    with _loader(root, batch_size=2, shuffle=False) as loader:
        got = np.concatenate([b.numpy() for b in loader.epoch(0)])
    assert np.array_equal(got, np.stack([arrays[n] for n in sorted(arrays)]))


# ------------------------------------------------------------------------------------ order and split
def _shares(length: int, world: int, *, epoch: int, seed: int, shuffle: bool) -> list[list[int]]:
    return [_sampler_order(range(length), epoch=epoch, seed=seed, num_replicas=world, rank=r, shuffle=shuffle)
            for r in range(world)]


def test_the_plan_is_the_samplers_order_and_split_for_many_worlds() -> None:
    """Pure: over lengths, world sizes, batch sizes, drop_last, seeds and epochs, like mosaicml/streaming."""
    cases = 0
    for length, world, batch, drop_last, (seed, epoch) in itertools.product(
            (0, 1, 2, 5, 7, 16, 17, 31), range(1, 10), (1, 2, 3, 8), (False, True), ((0, 0), (3, 1))):
        shares = _shares(length, world, epoch=epoch, seed=seed, shuffle=True)
        for rank in range(world):
            batches, padded = plan_batches(length, epoch=epoch, batch_size=batch, num_replicas=world,
                                           rank=rank, shuffle=True, seed=seed, drop_last=drop_last,
                                           balance="none")
            share = shares[rank]
            keep = len(share) // batch * batch if drop_last else len(share)
            assert [i for b in batches for i in b] == share[:keep] and padded == 0
            assert all(len(b) == batch for b in batches[:-1]) and (not drop_last or
                                                                     all(len(b) == batch for b in batches))
            cases += 1
        assert set(itertools.chain(*shares)) == set(range(length)), "every file on some rank"
    assert cases > 5000


@pytest.mark.parametrize("balance", ["pad", "truncate"])
def test_equal_batch_counts_over_simulated_nodes(balance: str) -> None:
    """Nodes with epochs of different sizes, several ranks each; the all_reduce is simulated."""
    for node_sizes, local, batch, drop_last in itertools.product(
            ([5, 12], [0, 3, 9], [17, 16, 1, 40], [2]), (1, 2, 3), (1, 2, 4), (False, True)):
        if balance == "pad" and 0 in node_sizes:
            continue  # a rank without files cannot pad (an error, tested below)
        plain = {(n, r): plan_batches(size, epoch=1, batch_size=batch, num_replicas=local, rank=r,
                                      shuffle=True, seed=2, drop_last=drop_last, balance="none")[0]
                 for n, size in enumerate(node_sizes) for r in range(local)}
        counts = [len(b) for b in plain.values()]

        def reduce(value: int, op: str, counts: list[int] = counts) -> int:
            assert value in counts
            return max(counts) if op == "max" else min(counts)

        got = {key: plan_batches(node_sizes[key[0]], epoch=1, batch_size=batch, num_replicas=local,
                                 rank=key[1], shuffle=True, seed=2, drop_last=drop_last,
                                 balance=balance, reduce=reduce)  # type: ignore[arg-type]
               for key in plain}
        assert len({len(batches) for batches, _ in got.values()}) == 1, "every rank the same batch count"
        for key, (batches, padded) in got.items():
            flat, share = [i for b in batches for i in b], _shares(node_sizes[key[0]], local, epoch=1, seed=2,
                                                                    shuffle=True)[key[1]]
            if balance == "pad":  # this rank's own share, cycled from its start
                assert flat == (share * (len(flat) // max(1, len(share)) + 1))[:len(flat)]
                assert drop_last or set(flat) == set(share)
            else:
                assert flat == share[:len(flat)]
            assert padded == len(flat) - len(share) or (drop_last and padded >= len(flat) - len(share))
    with pytest.raises(RuntimeError, match="no files for this rank"):
        plan_batches(0, epoch=0, batch_size=2, num_replicas=1, rank=0, shuffle=True, seed=0, drop_last=False,
                     balance="pad", reduce=lambda value, op: 3)


def test_batches_are_epoch_loaders_batches(tmp_path: Path) -> None:
    names = [f"{i:02d}.npy" for i in range(13)]
    root = _publish(tmp_path, {n: _npy(np.array([i])) for i, n in enumerate(names)}, {0: names, 1: names[:8]})
    for world, rank, batch, drop_last in ((1, 0, 4, False), (3, 2, 2, True), (4, 1, 3, False),
                                          (5, 4, 1, True)):
        options = {"num_replicas": world, "rank": rank, "batch_size": batch, "drop_last": drop_last,
                   "seed": 9, "progress": None, "report": False}
        with EpochLoader(root, num_workers=0, **options) as reference, \
                ArrayLoader(root, num_threads=2, **options) as loader:  # type: ignore[arg-type]
            for epoch in (0, 1):
                _, path_batches, _, _ = reference.plan(epoch)
                expected = [[int(p.split("/")[-1][:2]) for p in b] for b in path_batches]
                assert [b[:, 0].tolist() for b in loader.epoch(epoch)] == expected


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_ranks_read_the_samplers_share_end_to_end(tmp_path: Path, world: int) -> None:
    names = [f"{i:02d}.npy" for i in range(11)]
    root = _publish(tmp_path, {n: _npy(np.full((2,), i)) for i, n in enumerate(names)}, {0: names})
    seen: list[int] = []
    for rank in range(world):
        with _loader(root, batch_size=2, num_replicas=world, rank=rank, seed=4) as loader:
            got = [int(v) for b in loader.epoch(0) for v in b[:, 0]]
        assert got == _sampler_order(range(11), epoch=0, seed=4, num_replicas=world, rank=rank)
        seen += got
    assert set(seen) == set(range(11)) and len(seen) == -(-11 // world) * world


# ------------------------------------------------------------------------------------ two real ranks
SIZES = {0: [5, 12], 1: [9, 4]}


def _rank_main(rank: int, root: str, store: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    report: dict[str, dict[str, object]] = {}
    try:
        for balance in ("pad", "truncate"):
            with ArrayLoader(root, batch_size=2, num_threads=2, balance=balance, progress=None,  # type: ignore[arg-type]
                             timeout=60, report=False) as loader:
                for epoch in SIZES:
                    seen: list[int] = []
                    for batch in loader.epoch(epoch):
                        seen += [int(v) for v in batch[:, 0]]
                        dist.all_reduce(torch.ones(1))  # a DDP step's gradient sync: hangs on unequal counts
                    report[f"{balance} {epoch}"] = {"seen": seen, "padded": loader.history[-1].padded}
    finally:
        dist.destroy_process_group()
    Path(out).write_text(json.dumps(report))


def test_two_gloo_ranks_with_different_epochs_get_equal_batch_counts(tmp_path: Path) -> None:
    """One node per rank (LOCAL_WORLD_SIZE=1), each with its own epoch sizes; pad, then truncate."""
    for rank in range(2):
        names = [f"{i:02d}.npy" for i in range(12)]
        files = {n: _npy(np.array([i])) for i, n in enumerate(names)}
        _publish(tmp_path, files, {e: names[:s[rank]] for e, s in SIZES.items()}, name=f"node{rank}")
    env = {**os.environ, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2",
           "PYTHONPATH": str(TESTS)}
    procs = [subprocess.Popen([sys.executable, __file__, str(r), str(tmp_path / f"node{r}"),
                               str(tmp_path / "store"), str(tmp_path / f"rank{r}.json")],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(2)]
    try:
        outputs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for (epoch, sizes), balance in itertools.product(SIZES.items(), ("pad", "truncate")):
        counts = [-(-s // 2) for s in sizes]
        target = max(counts) if balance == "pad" else min(counts)
        for rank in range(2):
            mine = reports[rank][f"{balance} {epoch}"]
            seen = mine["seen"]
            assert -(-len(seen) // 2) == target, (balance, epoch, rank)
            if balance == "pad":
                assert set(seen) == set(range(sizes[rank])) and len(seen) - sizes[rank] == mine["padded"]
            else:
                assert max(Counter(seen).values()) == 1 and len(seen) == min(sizes[rank], target * 2)


# ------------------------------------------------------------------------------------ batches and buffers
def _numbered(tmp_path: Path, count: int, epochs: int = 1) -> Path:
    names = [f"{i:02d}.npy" for i in range(count)]
    return _publish(tmp_path, {n: _npy(np.full((4,), i, np.int32)) for i, n in enumerate(names)},
                    {e: names for e in range(epochs)})


def test_drop_last_break_and_a_new_epoch_closing_the_unfinished_one(tmp_path: Path) -> None:
    root = _numbered(tmp_path, 10, epochs=2)
    with _loader(root, batch_size=4, drop_last=True) as loader:
        assert [len(b) for b in loader.epoch(0)] == [4, 4]
        with _loader(root, batch_size=4) as keep_last:
            assert [len(b) for b in keep_last.epoch(0)] == [4, 4, 2]
        for _ in loader.epoch(1):
            break
        assert (loader.history[-1].complete, loader.history[-1].batches) == (False, 1)
        first = iter(loader.epoch(0))
        next(first)
        values = sorted(int(v) for b in loader.epoch(1) for v in b[:, 0])
        assert len(values) == 8 and set(values) <= set(range(10))
        assert next(first, None) is None, "the unfinished epoch was closed"
        assert [(s.epoch, s.complete) for s in loader.history] == [(0, True), (1, False), (0, False),
                                                                   (1, True)]


def test_the_ring_is_reused_and_copy_gives_batches_of_their_own(tmp_path: Path) -> None:
    root = _numbered(tmp_path, 24, epochs=2)
    with _loader(root, batch_size=2, prefetch=2) as loader:
        pointers = [b.untyped_storage().data_ptr() for b in loader.epoch(0)]
        ring = [t.untyped_storage().data_ptr() for t in loader.ring]
        assert len(ring) == 3 and len(set(ring)) == 3
        assert pointers == [ring[i % 3] for i in range(12)], "batch b+3 reuses batch b's buffer, in order"
        pointers = [b.untyped_storage().data_ptr() for b in loader.epoch(1)]
        assert set(pointers) == set(ring), "the next epoch reads into the same ring: nothing allocated"
    with _loader(root, batch_size=2, copy=True, shuffle=False) as loader:
        kept = list(loader.epoch(0))
        assert loader.ring == []
    assert len({b.untyped_storage().data_ptr() for b in kept}) == 12
    assert [int(v) for b in kept for v in b[:, 0]] == list(range(24)), "kept batches still hold their values"


# ------------------------------------------------------------------------------------ errors
ERROR_CASES: dict[str, tuple[dict[str, Callable[[Path], object]], dict[str, object], str]] = {  # bad, options
    "wrong shape": ({"z.npy": _npy(np.zeros((3, 4), np.float32))}, {},
                    r"z\.npy holds float32 \(3, 4\), but this loader reads float32 \(4,\)"),
    "wrong dtype": ({"z.npy": _npy(np.zeros(4, np.float64))}, {},
                    r"z\.npy holds float64 \(4,\), but this loader reads float32 \(4,\)"),
    "truncated npy": ({"z.npy": lambda p: p.write_bytes(_bytes_of(np.zeros(4, np.float32))[:-3])}, {},
                      r"z\.npy is truncated: 141 bytes, but a \.npy of float32 \(4,\) needs 144"),
    "not npy": ({"z.npy": lambda p: p.write_bytes(b"hello")}, {}, r"z\.npy is not a \.npy array"),
    "fortran order": ({"z.npy": _npy(np.asfortranarray(np.zeros((2, 2), np.float32)))},
                      {"good_shape": (2, 2)}, r"z\.npy is stored in Fortran order"),
    "big endian": ({"z.npy": _npy(np.zeros(4, ">f4"))}, {}, r"z\.npy holds >f4 in non-native byte order"),
    "compressed member": ({"z.npz": _npz(compressed=True, x=np.zeros(4, np.float32))}, {"member": "x"},
                          r"z\.npz: array 'x' is compressed \(np\.savez_compressed\)"),
    "missing member": ({"z.npz": _npz(y=np.zeros(4, np.float32))}, {"member": "x"},
                       r"z\.npz has no array 'x' \(it holds \['y'\]\)"),
    "wrong member shape": ({"z.npz": _npz(x=np.zeros(5, np.float32))}, {"member": "x"},
                           r"z\.npz \(member 'x'\) holds float32 \(5,\), but this loader reads float32 "
                           r"\(4,\)"),
    "truncated npz": ({"z.npz": lambda p: p.write_bytes(_cut_in_member(_zip_bytes(x=np.zeros(4, "f4"))))},
                      {"member": "x"},
                      r"z\.npz is truncated: \d+ bytes, but member 'x' of float32 \(4,\) needs"),
    "unreadable zip": ({"z.npz": lambda p: p.write_bytes(_zip_bytes(x=np.zeros(4, np.float32))[:100])},
                       {"member": "x"}, r"z\.npz is not a readable \.npz \(zip\) file, or it is truncated"),
    "short raw": ({"z.raw": lambda p: p.write_bytes(b"\0" * 15)}, {"format": "raw"},
                  r"z\.raw is truncated: 15 bytes, but a raw float32 \(4,\) needs 16"),
    "long raw": ({"z.raw": lambda p: p.write_bytes(b"\0" * 17)}, {"format": "raw"},
                 r"z\.raw holds 17 bytes, more than the 16 of a raw float32 \(4,\)"),
}


def _bytes_of(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _cut_in_member(data: bytes) -> bytes:
    """A zip cut 8 bytes into its first member's array data (np.savez writes 128-byte .npy headers)."""
    return data[:data.index(b"\x93NUMPY") + 128 + 8]


def _zip_bytes(**arrays: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_a_sample_that_does_not_fit_is_an_error_naming_the_file(tmp_path: Path, case: str) -> None:
    bad, options, message = ERROR_CASES[case]
    suffix = Path(next(iter(bad))).suffix
    good = np.arange(4, dtype=np.float32).reshape(options.get("good_shape", (4,)))  # type: ignore[arg-type]
    options = {k: v for k, v in options.items() if k != "good_shape"}
    writer = {".npy": _npy(good), ".npz": _npz(x=good, label=np.array([1])), ".raw": _raw(good)}[suffix]
    files = {f"{i}{suffix}": writer for i in range(4)}
    root = _publish(tmp_path, {**files, **bad}, {0: [*files, *bad], 1: list(files)})
    if options.get("format") == "raw":
        options = {**options, "dtype": "float32", "shape": (4,)}
    with _loader(root, batch_size=2, **options) as loader:
        with pytest.raises(ArraySampleError, match=message) as caught:
            for _ in loader.epoch(0):
                pass
        named = str(root / "epoch-0" / "train" / "z")
        assert caught.value.path is not None and caught.value.path.startswith(named)
        assert named in str(caught.value)
        assert loader.history[-1].complete is False
        values = sorted(int(v) for b in loader.epoch(1) for v in b.reshape(len(b), -1)[:, 3])
        assert values == [3, 3, 3, 3], "the loader goes on with the next epoch"


def test_a_compressed_or_unreadable_first_file_and_unknown_extensions(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _npz(compressed=True, x=np.zeros(3)), "b.dat": _raw(np.zeros(3))},
                    {0: ["a.npz"], 1: ["b.dat"]})
    with _loader(root) as loader, pytest.raises(ArraySampleError, match=r"a\.npz: array 'x' is compressed"):
        list(loader.epoch(0))
    with _loader(root) as loader, pytest.raises(ValueError, match=r"raw samples need dtype= and shape="):
        list(loader.epoch(1))
    with _loader(root, dtype="float64", shape=3) as loader:
        assert [b.shape for b in loader.epoch(1)] == [(1, 3)]
    assert zipfile.is_zipfile(tmp_path / "objects" / "a.npz")


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 0}, "batch_size"), ({"batch_size": 2, "num_threads": 0}, "num_threads"),
    ({"batch_size": 2, "prefetch": 0}, "prefetch"), ({"batch_size": 2, "format": "tiff"}, "format must be"),
    ({"batch_size": 2, "format": "raw"}, "needs dtype= and shape="),
    ({"batch_size": 2, "shape": (2, -1)}, "shape"),
    ({"batch_size": 2, "partition": "rack"}, "partition"), ({"batch_size": 2, "balance": "avg"}, "balance"),
    ({"batch_size": 2, "num_replicas": 2, "rank": 2}, "rank must be"),
    ({"batch_size": 2, "timeout": -1}, "timeout"),
    ({"batch_size": 2, "device": "meta"}, "device must be"),
    ({"batch_size": 2, "retry_seconds": -1}, "retry_seconds"),
])
def test_options_are_validated_up_front(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ArrayLoader(tmp_path, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_cuda_device_without_cuda_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        ArrayLoader(tmp_path, batch_size=2, device="cuda")
    with _loader(_numbered(tmp_path, 3), device="cpu") as loader:
        assert [b.device.type for b in loader.epoch(0)] == ["cpu"]


# ------------------------------------------------------------------------------------ pauses and restarts
def test_the_running_epoch_is_held_open_until_its_last_batch(tmp_path: Path) -> None:
    root = _numbered(tmp_path, 6, epochs=2)
    with _loader(root, batch_size=2) as loader:
        run = loader.epoch(0)
        held = []
        for _ in run:
            assert run.dataset is not None
            held.append(run.dataset.held)
        assert held == [True, True, True] and run.dataset is not None and not run.dataset.held
        broken = loader.epoch(1)
        for _ in broken:
            break
        assert broken.dataset is not None and not broken.dataset.held, "released when the loop breaks"


def test_a_listed_file_briefly_unreachable_is_retried_and_one_that_stays_missing_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import errno
    import logging

    from epochfs.torchclient import retry

    monkeypatch.setattr(retry._State, "given_up_at", None)
    root = _numbered(tmp_path, 6, epochs=2)
    flaky = str(root / "epoch-0" / "train" / "03.npy")
    real_open, failures = os.open, [errno.ENOENT, errno.ENOTCONN, errno.ENOENT]

    def open_like_a_restarting_mount(path: str, flags: int, *args: int) -> int:
        if path == flaky and failures:
            err = failures.pop()
            raise OSError(err, os.strerror(err), path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_like_a_restarting_mount)
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"), \
            _loader(root, batch_size=2) as loader:
        assert sorted(int(v) for b in loader.epoch(0) for v in b[:, 0]) == list(range(6))
        lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
        # Three failures: the first read (outside the retry loop), then two retries; the third reads.
        assert failures == [] and len(lines) == 1 and "read after" in lines[0] and "2 retries" in lines[0]
        assert "epoch-0/train/03.npy" in lines[0]
        gone = _loader(root, batch_size=2, retry_seconds=0.2)
        (root / "epoch-1" / "train" / "04.npy").unlink()
        with pytest.raises(ArraySampleError, match=r"04\.npy.*No such file.*tried for 0\.2s"):
            list(gone.epoch(1))
        gone.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
    assert len(lines) == 2 and "giving up" in lines[1] and "04.npy" in lines[1], lines


# ------------------------------------------------------------------------------------ epochs and reports
def test_epochs_are_waited_for_at_the_boundary_like_epoch_loader(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(20):
        np.save(objects / f"{i:02x}{i:06d}.npy", np.full((3,), i, np.int64))
    events: list[tuple[str, int]] = []
    root = tmp_path / "mnt"
    with GrowingFolder(root, objects, sizes=[7, 13, 20]) as sidecar:

        def progress(line: str) -> None:
            events.append(("wait", int(line.split("waiting for epoch ")[1].split()[0])))
            sidecar.progress(line)

        with _loader(root, batch_size=3, progress=progress, timeout=60) as loader:
            for epoch in (0, 1, 2):
                values = []
                for batch in loader.epoch(epoch):
                    events.append(("batch", epoch))
                    values += [int(v) for v in batch[:, 0]]
                assert sorted(values) == list(range([7, 13, 20][epoch]))
    assert [s.files for s in loader.history] == [7, 13, 20]
    for n in (1, 2):  # epoch n+1 is asked for after the last batch of epoch n, never before
        assert events.index(("wait", n)) > max(i for i, e in enumerate(events) if e == ("batch", n - 1))
    assert sidecar.asked[:2] == [1, 2]


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()
    c.server.server_close()


def test_deliveries_are_reported_to_the_sidecar(tmp_path: Path, collector: Collector,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", collector.url)
    root = _numbered(tmp_path, 7, epochs=2)
    with ArrayLoader(root, batch_size=3, progress=None) as loader:
        for epoch in (0, 1):
            list(loader.epoch(epoch))
    assert collector.total("samples") == 14
    assert collector.total("bytes") == sum(s.bytes for s in loader.history) > 0


# ------------------------------------------------------------------------------------ a real mount
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_every_value_through_a_real_sidecar_mount(s3: S3Server, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    objects = {f"train/{i:05d}.npy": _bytes_of(rng.standard_normal(2000).astype(np.float32))
               for i in range(48)}
    put_objects(s3, "arrays", objects)
    with running_sidecar(tmp_path, remote="s3://arrays", endpoint=s3.endpoint,
                         extra=("--capacity", "4Mi", "--min-samples", "8")) as car:
        monkeypatch.setenv("EPOCHFS_REPORT_URL", f"{car.base}/v1/client-report")
        with ArrayLoader(car.mount, batch_size=4, num_threads=3, progress=None, timeout=120) as loader:
            for epoch in (0, 1, 2):
                run = loader.epoch(epoch)  # the lookup of epoch-N at the boundary cuts it
                rows = [row.numpy().copy() for batch in run for row in batch]
                assert run.dataset is not None and run.dataset.source == "manifest"
                order = _sampler_order(run.dataset, epoch=epoch, seed=0)
                assert len(rows) == len(order) >= 8
                for row, index in zip(rows, order, strict=True):
                    rel = run.dataset.files[index]
                    assert np.array_equal(row, np.load(io.BytesIO(objects[rel]))), f"epoch-{epoch}/{rel}"
        history = loader.history
        assert [h.files for h in history] == sorted(h.files for h in history), "epochs do not shrink here"
        assert car.metric("epochfs_client_samples_total") == sum(h.samples for h in history)
        assert car.metric("epochfs_client_bytes_total") == sum(h.bytes for h in history)


# ------------------------------------------------------------------------------------ the benchmark
def test_the_benchmark_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from epochfs.benchmarks import arrayloader as bench

    out = tmp_path / "reads.json"
    device = "cuda" if torch.cuda.is_available() else "cpu"  # every batch on it inside the timed epoch
    assert bench.main(["--sizes", "65536", "262144", "--mb", "2", "--repeat", "1", "--no-cold",
                       "--threads", "2", "--workers", "1", "--json", str(out), "--device", device]) == 0
    reads = json.loads(out.read_text())
    assert sorted((r["size"], r["loader"]) for r in reads) == sorted(
        itertools.product((65536, 262144), ("array", "epoch", "plain")))
    for read in reads:  # every loader read the whole epoch, the same files
        assert read["samples"] == 2_000_000 // read["size"] and read["place"] == "direct"
        assert read["bytes"] == next(r["bytes"] for r in reads if r["size"] == read["size"])
    printed = capsys.readouterr().out
    assert "medians" in printed and "array" in printed and "(1.00x)" in printed
    assert f"batches to {device}" in printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_the_benchmark_refuses_a_device_it_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    from epochfs.benchmarks import arrayloader as bench

    for device, said in (("cuda", "CUDA is not available here"), ("bogus", "bogus")):
        with pytest.raises(SystemExit) as stopped:
            bench.main(["--no-cold", "--device", device])
        assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_the_benchmark_refuses_a_device_type_it_does_not_feed(capsys: pytest.CaptureFixture[str]) -> None:
    """A real torch device type other than cpu and cuda (mps, meta) is named as unsupported, not
    as a missing CUDA, whether or not this machine has CUDA."""
    from epochfs.benchmarks import arrayloader as bench

    for device in ("mps", "meta"):
        with pytest.raises(SystemExit) as stopped:
            bench.main(["--no-cold", "--device", device])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and "only cpu and cuda devices are supported" in err, err


# ------------------------------------------------------------------------------------ CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batches_copied_to_the_device_on_a_side_stream(tmp_path: Path) -> None:  # pragma: no cover
    root = _numbered(tmp_path, 30, epochs=2)
    with _loader(root, batch_size=4, device="cuda", shuffle=False) as loader:
        kept = [b for epoch in (0, 1) for b in loader.epoch(epoch)]
        assert all(b.is_cuda for b in kept) and all(t.is_pinned() for t in loader.ring)
    torch.cuda.synchronize()
    assert [int(v) for b in kept for v in b[:, 0].cpu()] == list(range(30)) * 2


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
