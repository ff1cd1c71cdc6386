"""EpochDataset on plain folders with the mount's layout: order, decoders, waiting, errors."""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from epochfs.torchclient import EpochDataset, ManifestError, SampleDecodeError, read_manifest
from epochfs.torchclient.layout import format_manifest, manifest_path, parse_manifest
from epochfs.torchclient.plainfolder import md5_of, publish_epoch


class _Evil:
    """Pickled into a .pt file: weights_only loading must refuse to build it."""

    def __reduce__(self):
        return (print, ("executed",))


@pytest.fixture
def objects(tmp_path: Path) -> Path:
    """One object file of every kind, named like the remote keys they stand for."""
    store = tmp_path / "objects"
    store.mkdir()
    rng = np.random.default_rng(0)
    np.save(store / "a.npy", rng.standard_normal((4, 3)).astype(np.float32))
    np.savez(store / "b.npz", frames=np.arange(6, dtype=np.uint8).reshape(2, 3), flow=np.ones(3, np.float64))
    torch.save({"w": torch.arange(5)}, store / "c.pt")
    (store / "d.bin").write_bytes(bytes(range(10)))
    return store


def _publish(root: Path, epoch: int, objects: Path, names: list[str]) -> None:
    publish_epoch(root, epoch, {f"train/{name}": objects / name for name in names})


def test_files_come_from_the_manifest_in_path_order_and_match_a_walk(tmp_path: Path, objects: Path) -> None:
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {"z/last.bin": objects / "d.bin", "a/first.npy": objects / "a.npy",
                            "m/mid.npz": objects / "b.npz"})
    ds = EpochDataset(root, 0)
    assert ds.source == "manifest"
    assert ds.files == ["a/first.npy", "m/mid.npz", "z/last.bin"]
    assert ds.sizes == [(objects / n).stat().st_size for n in ("a.npy", "b.npz", "d.bin")]
    assert ds.checksums == [md5_of(objects / n) for n in ("a.npy", "b.npz", "d.bin")]
    assert ds.nbytes == sum(ds.sizes)
    manifest_path(root, 0).unlink()
    walked = EpochDataset(root, 0)
    assert walked.source == "walk"
    assert (walked.files, walked.sizes) == (ds.files, ds.sizes)


def test_every_decode_kind(tmp_path: Path, objects: Path) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy", "b.npz", "c.pt", "d.bin"])
    auto = EpochDataset(root, 0)
    npy, npz, pt, raw = (auto[i] for i in range(4))
    assert torch.equal(npy, torch.from_numpy(np.load(objects / "a.npy")))
    assert set(npz) == {"frames", "flow"} and npz["flow"].dtype == torch.float64
    assert torch.equal(npz["frames"], torch.arange(6, dtype=torch.uint8).reshape(2, 3))
    assert torch.equal(pt["w"], torch.arange(5))
    assert raw.dtype == torch.uint8 and raw.tolist() == list(range(10))
    assert torch.equal(EpochDataset(root, 0, decode="npy")[0], npy)
    assert torch.equal(EpochDataset(root, 0, decode="npz")[1]["flow"], npz["flow"])
    assert torch.equal(EpochDataset(root, 0, decode="pt")[2]["w"], pt["w"])
    as_bytes = EpochDataset(root, 0, decode="bytes")
    assert as_bytes[0].numel() == (objects / "a.npy").stat().st_size
    named = EpochDataset(root, 0, decode=lambda path: Path(path).name)
    assert [named[i] for i in range(4)] == ["a.npy", "b.npz", "c.pt", "d.bin"]


def test_transform_applies_to_the_decoded_sample(tmp_path: Path, objects: Path) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy"])
    ds = EpochDataset(root, 0, transform=lambda t: t * 2)
    assert torch.allclose(ds[0], torch.from_numpy(np.load(objects / "a.npy")) * 2)


def test_pt_is_loaded_weights_only(tmp_path: Path, objects: Path) -> None:
    torch.save({"evil": _Evil()}, objects / "evil.pt")
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["evil.pt"])
    with pytest.raises(SampleDecodeError, match=r"evil\.pt"):
        EpochDataset(root, 0)[0]


def test_waits_for_the_cut_then_reads_the_new_epoch(tmp_path: Path, objects: Path) -> None:
    """The dataset asks for epoch 1 while only epoch 0 exists; a 'sidecar' thread cuts it once asked."""
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy"])
    asked = threading.Event()
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        asked.set()

    def sidecar() -> None:
        if asked.wait(30):
            _publish(root, 1, objects, ["a.npy", "d.bin"])

    cutter = threading.Thread(target=sidecar)
    cutter.start()
    try:
        ds = EpochDataset(root, 1, timeout=30, progress=progress)
    finally:
        cutter.join()
    assert ds.files == ["train/a.npy", "train/d.bin"]
    assert ds.wait_seconds > 0
    assert "waiting for epoch 1" in lines[0] and "epochs 0 present" in lines[0]


def test_timeout_names_the_epoch_and_what_is_present(tmp_path: Path, objects: Path) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy"])
    _publish(root, 1, objects, ["a.npy"])
    with pytest.raises(TimeoutError) as caught:
        EpochDataset(root, 5, timeout=0.2, progress=None)
    message = str(caught.value)
    assert "epoch 5" in message and str(root) in message
    assert "epochs 0, 1 present" in message and "1 samples cached" in message


def test_missing_root_and_missing_epoch_without_wait(tmp_path: Path, objects: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        EpochDataset(tmp_path / "nowhere", 0)
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy"])
    with pytest.raises(FileNotFoundError, match=r"epoch 3 is not under .*epochs 0 present"):
        EpochDataset(root, 3, wait=False)


@pytest.mark.parametrize("name, content", [
    ("bad.npy", b"\x93NUMPY\x01\x00garbage that is no header"),
    ("bad.npz", b"PK\x03\x04 not really a zip archive"),
])
def test_corrupt_sample_is_a_clear_error_naming_the_file(tmp_path: Path, objects: Path, name: str,
                                                         content: bytes) -> None:
    (objects / name).write_bytes(content)
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy", name])
    ds = EpochDataset(root, 0)
    assert ds[0].shape == (4, 3)
    with pytest.raises(SampleDecodeError, match=rf"epoch-0/train/{name}") as caught:
        ds[1]
    assert caught.value.path is not None and caught.value.path.endswith(name)


def test_truncated_npy_is_reported(tmp_path: Path, objects: Path) -> None:
    whole = (objects / "a.npy").read_bytes()
    (objects / "cut.npy").write_bytes(whole[:-7])
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["cut.npy"])
    with pytest.raises(SampleDecodeError, match=r"cut\.npy"):
        EpochDataset(root, 0)[0]


@pytest.mark.parametrize("kwargs, match", [
    ({"decode": "jpeg"}, "decode must be one of"),
    ({"timeout": 0}, "timeout must be a positive"),
    ({"transform": 3}, "transform must be callable"),
])
def test_options_are_validated_up_front(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EpochDataset(tmp_path / "nowhere", 0, **kwargs)
    with pytest.raises(ValueError, match="epoch must be"):
        EpochDataset(tmp_path, -1)


def test_manifest_errors_name_the_file_and_line(tmp_path: Path, objects: Path) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy", "d.bin"])
    path = manifest_path(root, 0)
    good = path.read_text()
    assert parse_manifest(good, source="x").entries == read_manifest(root, 0).entries  # type: ignore[union-attr]
    path.write_text(good.replace("files=2", "files=3"))
    with pytest.raises(ManifestError, match=r"epoch-0.manifest: header says files=3, found 2"):
        EpochDataset(root, 0)
    path.write_text("not a manifest\n")
    with pytest.raises(ManifestError, match="line 1"):
        EpochDataset(root, 0)
    path.write_text(good + "broken line\n")
    with pytest.raises(ManifestError, match="line 4"):
        EpochDataset(root, 0)
    with pytest.raises(ManifestError, match="expected epoch=1"):
        parse_manifest(good, source="m", epoch=1)
    with pytest.raises(ValueError, match="tabs or newlines"):
        format_manifest(0, [*parse_manifest(good, source="m").entries[:1],
                            type(parse_manifest(good, source="m").entries[0])("a\tb", 1, "md5:")])


class FlakyDecoder:
    """Fails like a path on a mount being replaced (ENOENT, then ENOTCONN), then reads."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, path: str) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            err = errno.ENOENT if self.calls % 2 else errno.ENOTCONN
            raise OSError(err, os.strerror(err), path)
        return Path(path).read_bytes()


def test_a_listed_file_briefly_unreachable_is_retried_with_one_log_line(
        tmp_path: Path, objects: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["d.bin"])
    decoder = FlakyDecoder(failures=3)
    ds = EpochDataset(root, 0, decode=decoder)
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
        assert ds[0] == bytes(range(10))
    assert decoder.calls == 4
    lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
    assert len(lines) == 1 and "read after" in lines[0] and "3 retries" in lines[0], lines
    assert "epoch-0/train/d.bin" in lines[0]


def test_a_file_that_stays_missing_fails_after_the_bound(tmp_path: Path, objects: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy", "d.bin", "c.pt"])
    ds = EpochDataset(root, 0, retry_seconds=0.2)
    for name in ("a.npy", "d.bin"):
        (root / "epoch-0" / "train" / name).unlink()
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
        with pytest.raises(SampleDecodeError, match=r"vanished or never existed: .*a\.npy.*tried for 0\.2s"):
            ds[0]
        # Given up once: the next missing file fails at once (one bound per process, not per file).
        with pytest.raises(SampleDecodeError, match=r"d\.bin"):
            ds[2]
    lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
    assert len(lines) == 1 and "giving up" in lines[0] and "retry_seconds=0.2" in lines[0], lines
    assert torch.equal(ds[1]["w"], torch.arange(5))  # a read that succeeds ends the fast failing
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"), \
            pytest.raises(SampleDecodeError, match=r"d\.bin"):
        ds[2]
    lines = [r.getMessage() for r in caplog.records if r.name == "epochfs.torchclient"]
    assert len(lines) == 2 and "giving up" in lines[1], lines  # retried again, then given up


def test_the_dataset_holds_its_epoch_open_and_copies_do_not(tmp_path: Path, objects: Path) -> None:
    import pickle

    root = tmp_path / "mnt"
    _publish(root, 0, objects, ["a.npy"])
    ds = EpochDataset(root, 0)
    assert ds.held
    held = [int(fd) for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == str(root / "epoch-0")]
    assert len(held) == 1
    copy = pickle.loads(pickle.dumps(ds))
    assert not copy.held and copy[0].shape == (4, 3)
    ds.release()
    assert not ds.held
    assert not any(os.path.realpath(f"/proc/self/fd/{fd}") == str(root / "epoch-0")
                   for fd in os.listdir("/proc/self/fd"))
    assert not EpochDataset(root, 0, hold=False).held
    with pytest.raises(ValueError, match="retry_seconds"):
        EpochDataset(root, 0, retry_seconds=-1)


def test_the_waiting_line_says_how_far_epoch_0_is(tmp_path: Path) -> None:
    """Before the first cut, the sidecar's status.json has first_epoch: the trainer's waiting line
    and its timeout say 'epoch 0: 54/200 samples cached (27%)' (issue 21); the cache's bytes in the
    unit that fits (it said "0.0 of 1.0 MB")."""
    import json

    from epochfs.torchclient.describe import describe_root

    root = tmp_path / "mnt"
    (root / ".epochfs").mkdir(parents=True)
    status = {"samples": 54, "cache_bytes": 5400, "capacity_bytes": 10**6, "pending_cuts": [0],
              "first_epoch": {"samples": 54, "target": 200}}
    (root / ".epochfs" / "status.json").write_text(json.dumps(status))
    assert describe_root(root) == ("no epoch folders yet; sidecar: epoch 0: 54/200 samples cached (27%), "
                                   "5.4 kB of 1.0 MB, pending cuts [0]")
    with pytest.raises(TimeoutError, match=r"epoch 0: 54/200 samples cached \(27%\)"):
        EpochDataset(root, 0, timeout=0.1, progress=None)


def test_the_waiting_line_says_when_epoch_0_comes_from_its_last_reading(tmp_path: Path) -> None:
    """From its second report on, the trainer's waiting line says when epoch 0 comes, at the rate
    since the report before: 54 then 94 of 200 samples 10 s apart is 4.0 samples a second, ~26 s
    left (the issue's "epoch 0: 54/200 samples, ~20 s at 2.1 MB/s")."""
    import json

    from epochfs.torchclient.describe import FirstEpochPace, describe_root

    root = tmp_path / "mnt"
    (root / ".epochfs").mkdir(parents=True)

    def status(samples: int) -> None:
        (root / ".epochfs" / "status.json").write_text(json.dumps(
            {"samples": samples, "cache_bytes": samples * 4096, "capacity_bytes": 10**7,
             "first_epoch": {"samples": samples, "target": 200}}))

    pace = FirstEpochPace()
    status(54)
    assert "~" not in describe_root(root, pace), "one reading: no rate yet"
    pace.at = (pace.at or 0.0) - 10.0  # as if that reading were 10 s ago
    status(94)
    line = describe_root(root, pace)
    match = re.search(r"epoch 0: 94/200 samples cached \(47%\), ~(\d+) s at (\d+\.\d) samples/s "
                      r"\((\d+\.\d) kB/s\)", line)
    assert match, line
    assert match.group(2) == "4.0" and 25 <= int(match.group(1)) <= 27 and match.group(3) == "16.4", line
    assert "~" not in describe_root(root, pace), "nothing came since: no rate to say"
