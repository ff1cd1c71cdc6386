"""Bad ``.npy`` headers and ``.npz`` members: strict parsing, size limits, errors naming file and field.

Each bad file is written by hand (a header's text as it stands in the file) or patched from what
``np.save``/``np.savez`` wrote. A header declaring more than its file holds, or more than
``max_array_bytes``, must be refused before anything of that size is allocated: the ArrayLoader's
ring stays empty, and nothing here takes more than a moment or more than a few MB.
"""

from __future__ import annotations

import io
import pickle
import struct
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import ArrayLoader, ArraySampleError, EpochLoader, SampleDecodeError
from epochfs.torchclient.decode import MAX_ARRAY_BYTES, decode_auto, decode_npz, resolve_decoder
from epochfs.torchclient.npyheader import NpyHeaderError, NpzMemberError, parse_npy_header
from epochfs.torchclient.npzread import NpzSample
from epochfs.torchclient.plainfolder import publish_epoch

GOOD = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"


def _npy_bytes(header: str, data: bytes = b"\0" * 16, version: tuple[int, int] = (1, 0),
               length: int | None = None) -> bytes:
    """A .npy file: magic, version, header length (``length`` overrides it), ``header`` padded as np.save
    pads it, then ``data``."""
    start = 10 if version[0] == 1 else 12
    text = header.encode("latin1")
    text += b" " * (-(start + len(text) + 1) % 64) + b"\n"
    size = len(text) if length is None else length
    packed = struct.pack("<H", size) if version[0] == 1 else struct.pack("<I", size)
    return b"\x93NUMPY" + bytes(version) + packed + text + data


def _with_shape(shape: str, descr: str = "'<f4'", fortran: str = "False") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


def _publish(tmp_path: Path, files: dict[str, bytes]) -> Path:
    objects = tmp_path / "objects"
    objects.mkdir(exist_ok=True)
    for name, data in files.items():
        (objects / name).write_bytes(data)
    root = tmp_path / "mnt"
    publish_epoch(root, 0, {f"train/{name}": objects / name for name in files})
    return root


def _loader(root: Path, **kwargs: Any) -> ArrayLoader:
    options: dict[str, Any] = {"batch_size": 2, "num_threads": 2, "progress": None, "report": False,
                               "shuffle": False, **kwargs}
    return ArrayLoader(root, **options)


def _first_error(loader: ArrayLoader) -> BaseException:
    started = time.monotonic()
    with pytest.raises(ArraySampleError) as caught:
        for _ in loader.epoch(0):
            pass
    assert time.monotonic() - started < 5, "refused at once, not after trying to allocate or read"
    return caught.value


# ------------------------------------------------------------------------ ArrayLoader, the first file
BAD_FIRST_HEADERS: dict[str, tuple[bytes, str, str]] = {  # file bytes, field, what the message shows
    "2**40 elements on a 16-byte file": (_npy_bytes(_with_shape("(1099511627776,)")), "shape",
                                         "(1099511627776,)"),
    "2**32 x 2**32 (int64 product wraps to 0)": (_npy_bytes(_with_shape("(4294967296, 4294967296)")),
                                                 "shape", "(4294967296, 4294967296)"),
    "a negative dimension": (_npy_bytes(_with_shape("(-4,)")), "shape", "(-4,)"),
    "a float dimension": (_npy_bytes(_with_shape("(4.7,)")), "shape", "(4.7,)"),
    "a bool dimension": (_npy_bytes(_with_shape("(True, 4)")), "shape", "(True, 4)"),
    "a list shape": (_npy_bytes(_with_shape("[4]")), "shape", "[4]"),
    "a string fortran_order": (_npy_bytes(_with_shape("(4,)", fortran="'no'")), "fortran_order", "'no'"),
    "an int fortran_order": (_npy_bytes(_with_shape("(4,)", fortran="0")), "fortran_order", "0"),
    "an unknown descr": (_npy_bytes(_with_shape("(4,)", descr="'<f9'")), "descr", "'<f9'"),
    "a number descr": (_npy_bytes(_with_shape("(4,)", descr="4")), "descr", "4"),
    "a record descr": (_npy_bytes(_with_shape("(4,)", descr="[('a', '<f4')]")), "descr", "[('a', '<f4')]"),
    "a missing key": (_npy_bytes("{'descr': '<f4', 'shape': (4,)}"), "header", "'descr'"),
    "an extra key": (_npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}"),
                     "header", "'x'"),
    "not a literal": (_npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2*2,)}"), "header",
                      "2*2"),
    "a header length over np.load's limit": (_npy_bytes(GOOD, version=(2, 0), length=20_000),
                                             "header length", "20000"),
    "an unknown version": (_npy_bytes(GOOD, version=(1, 1)), "version", "1.1"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIRST_HEADERS))
def test_a_bad_first_header_is_an_error_naming_the_file_the_field_and_the_value(tmp_path: Path,
                                                                                 case: str) -> None:
    data, field, shown = BAD_FIRST_HEADERS[case]
    root = _publish(tmp_path, {"a.npy": data, "b.npy": _npy_bytes(GOOD)})
    with _loader(root) as loader:
        error = _first_error(loader)
        assert loader.ring == [], "nothing is allocated from a refused header"
    path = str(root / "epoch-0" / "train" / "a.npy")
    assert isinstance(error, NpyHeaderError) and isinstance(error, ValueError)
    assert error.path == path and error.field == field
    message = str(error)
    assert path in message and field in message and shown in message, message


def test_the_same_headers_are_refused_by_the_parser_alone() -> None:
    """All but the two well-formed shapes too large for their file (the loader's size check refuses those)."""
    for case, (data, field, _) in BAD_FIRST_HEADERS.items():
        if case.startswith("2**"):
            assert parse_npy_header(data, "x.npy").spec.nbytes >= 4 << 40
            continue
        with pytest.raises(NpyHeaderError) as caught:
            parse_npy_header(data, "x.npy")
        assert caught.value.field == field, case
    header = parse_npy_header(_npy_bytes(GOOD), "x.npy")
    assert header.spec.shape == (4,) and header.spec.dtype == np.float32 and header.fortran is False


def test_a_header_declaring_more_than_the_file_holds_says_both_sizes(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npy": _npy_bytes(_with_shape("(1099511627776,)"))})
    with _loader(root) as loader:
        message = str(_first_error(loader))
    assert "4,398,046,511,104 bytes of data" in message and "holds 16 after the 128-byte header" in message


def test_a_later_file_with_a_bad_header_is_refused_too(tmp_path: Path) -> None:
    """A header that differs from the first file's bytes takes the slow path, which parses it strictly:
    ``(4.7,)`` is not read as ``(4,)``."""
    good = io.BytesIO()
    np.save(good, np.arange(4, dtype=np.float32))
    root = _publish(tmp_path, {"a.npy": good.getvalue(), "b.npy": _npy_bytes(_with_shape("(4.7,)"))})
    with _loader(root) as loader:
        error = _first_error(loader)
    assert isinstance(error, NpyHeaderError) and error.field == "shape" and error.value == (4.7,)
    assert str(root / "epoch-0" / "train" / "b.npy") in str(error)


def test_max_array_bytes_bounds_what_the_first_header_may_declare(tmp_path: Path) -> None:
    array = np.arange(1024, dtype=np.float32)  # 4096 bytes of data
    saved = io.BytesIO()
    np.save(saved, array)
    root = _publish(tmp_path, {"a.npy": saved.getvalue()})
    with _loader(root, max_array_bytes=4095) as loader:
        error = _first_error(loader)
        assert loader.ring == []
    assert isinstance(error, NpyHeaderError) and error.field == "shape" and error.value == (1024,)
    assert "max_array_bytes=4,095" in str(error) and "4,096 bytes" in str(error)
    with _loader(root, max_array_bytes=4096) as loader:
        assert [b.tolist() for b in loader.epoch(0)] == [[array.tolist()]]
    with _loader(root, max_array_bytes=None) as loader:
        assert len(list(loader.epoch(0))) == 1
    assert _loader(root).max_array_bytes is None  # the file's size bounds an ArrayLoader's sample
    assert MAX_ARRAY_BYTES == 2 << 30  # EpochLoader's default for an .npz member's inflated size


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2G"])
def test_max_array_bytes_is_validated_up_front(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ValueError, match="max_array_bytes must be an int >= 1 or None"):
        _loader(tmp_path, max_array_bytes=value)
    with pytest.raises(ValueError, match="max_array_bytes must be an int >= 1 or None"):
        EpochLoader(tmp_path, batch_size=1, num_workers=0, max_array_bytes=value, report=False)


def test_a_declared_raw_shape_over_the_limit_is_refused_before_allocating(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.raw": b"\0" * 16})
    with _loader(root, format="raw", dtype="float32", shape=(2**40,), max_array_bytes=2 << 30) as loader:
        error = _first_error(loader)
        assert loader.ring == []
    assert isinstance(error, NpyHeaderError) and "max_array_bytes" in str(error)
    assert str(root / "epoch-0" / "train" / "a.raw") in str(error)
    with _loader(root, format="raw", dtype="float32", shape=(2**20,), max_array_bytes=None) as loader:
        error = _first_error(loader)  # under no limit, the first file's size refuses it
        assert loader.ring == []
    assert "a.raw is truncated: 16 bytes, but a raw float32 (1048576,) needs 4194304" in str(error)


# ------------------------------------------------------------------------ ArrayLoader, .npz members
def _stored_npz(header: str, data: bytes = b"\0" * 16, name: str = "x.npy") -> bytes:
    """A zip with one stored member ``name`` holding a hand-written .npy (CRC and sizes consistent)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(name, _npy_bytes(header, data))
    return out.getvalue()


@pytest.mark.parametrize("shape, shown", [("(1099511627776,)", "(1099511627776,)"), ("(4.7,)", "(4.7,)"),
                                          ("(-1,)", "(-1,)")])
def test_a_bad_member_header_names_the_file_the_member_and_the_field(tmp_path: Path, shape: str,
                                                                     shown: str) -> None:
    root = _publish(tmp_path, {"a.npz": _stored_npz(_with_shape(shape))})
    with _loader(root, member="x") as loader:
        error = _first_error(loader)
        assert loader.ring == []
    path = str(root / "epoch-0" / "train" / "a.npz")
    assert isinstance(error, NpyHeaderError) and error.path == path and error.field == "shape"
    assert f"{path} (member 'x')" in str(error) and "shape" in str(error) and shown in str(error)


def test_a_missing_member_for_array_loader_is_also_a_key_error(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _stored_npz(GOOD, name="y.npy")})
    with _loader(root, member="x") as loader:
        error = _first_error(loader)
    assert isinstance(error, NpzMemberError) and isinstance(error, KeyError)
    assert str(error) == f"sample {root / 'epoch-0' / 'train' / 'a.npz'} has no array 'x' (it holds ['y'])"


# ------------------------------------------------------------------------ EpochLoader, .npz samples
def _epoch_loader(root: Path, **kwargs: Any) -> EpochLoader:
    options: dict[str, Any] = {"batch_size": 2, "num_workers": 0, "shuffle": False, "progress": None,
                               "report": False, **kwargs}
    return EpochLoader(root, **options)


def _savez(compressed: bool = False, **arrays: Any) -> bytes:
    out = io.BytesIO()
    if compressed:
        np.savez_compressed(out, **arrays)
    else:
        np.savez(out, **arrays)
    return out.getvalue()


def test_a_missing_npz_member_names_the_file_the_member_and_the_members_present(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _savez(x=np.zeros(3)), "b.npz": _savez(x=np.ones(3), z=np.ones(1))})
    with _epoch_loader(root, transform=lambda sample: sample["y"]) as loader, \
            pytest.raises(KeyError) as caught:  # caught as before, as a KeyError
        list(loader.epoch(0))
    error = caught.value
    assert isinstance(error, NpzMemberError) and isinstance(error, SampleDecodeError)
    path = str(root / "epoch-0" / "train" / "a.npz")
    assert error.path == path
    assert str(error) == f"sample {path} has no array 'y' (it holds ['x'])"


def test_samples_with_other_members_fail_the_batch_naming_the_file_even_from_a_worker(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _savez(x=np.zeros(3)), "b.npz": _savez(y=np.zeros(3))})
    with _epoch_loader(root, num_workers=1) as loader, pytest.raises(NpzMemberError) as caught:
        list(loader.epoch(0))
    path = root / "epoch-0" / "train" / "b.npz"
    assert f"sample {path} has no array 'x' (it holds ['y'])" in str(caught.value)


def test_npz_samples_still_decode_as_np_load_reads_them(tmp_path: Path) -> None:
    arrays = {"f": np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
              "big": np.arange(5, dtype=">i4"), "scalar": np.array(7, np.int16),
              "flags": np.array([True, False]), "empty": np.zeros((0, 3), np.float32)}
    for compressed in (False, True):
        path = tmp_path / f"s{int(compressed)}.npz"
        path.write_bytes(_savez(compressed, **arrays))
        sample = decode_npz(str(path))
        assert isinstance(sample, NpzSample) and list(sample) == list(arrays)
        with np.load(path) as expected:
            for name in arrays:
                assert np.array_equal(sample[name].numpy(), expected[name]), name
        copied = pickle.loads(pickle.dumps(sample))  # as a batch crosses from a worker
        assert copied.path == str(path) and list(copied) == list(arrays)
        with pytest.raises(NpzMemberError, match="has no array 'nope'"):
            copied["nope"]


def _inflating_npz(n_bytes: int) -> bytes:
    """A compressed .npz whose one member inflates to ``n_bytes`` of data (zeros: a few KB on disk)."""
    return _savez(True, x=np.zeros(n_bytes, np.uint8))


def test_a_member_inflating_past_max_array_bytes_is_refused_before_inflating(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    data = _inflating_npz(4 << 20)
    assert len(data) < 64 << 10
    root = _publish(tmp_path, {"a.npz": data})

    def no_inflating(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the recorded size alone must refuse it")

    path = str(root / "epoch-0" / "train" / "a.npz")
    with _epoch_loader(root, max_array_bytes=1 << 20) as loader:
        monkeypatch.setattr(zipfile.ZipFile, "open", no_inflating)
        with pytest.raises(ArraySampleError) as caught:
            list(loader.epoch(0))
        monkeypatch.undo()
    message = str(caught.value)
    assert f"{path} (member 'x') inflates to" in message and "max_array_bytes=1,048,576" in message
    # Just over the limit: the header is read, then the recorded data size refuses it.
    with pytest.raises(ArraySampleError, match=r"inflates to \(its zip entry records\) 4,194,304 bytes"):
        decode_npz(path, max_array_bytes=(4 << 20) - 1)
    assert decode_npz(path, max_array_bytes=4 << 20)["x"].shape == (4 << 20,)
    assert decode_auto(path, max_array_bytes=4 << 20)["x"].shape == (4 << 20,)
    with pytest.raises(ArraySampleError, match="max_array_bytes"):
        decode_auto(path, max_array_bytes=1 << 20)


def test_max_array_bytes_reaches_worker_processes(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _inflating_npz(1 << 20)})
    decoder = resolve_decoder("npz", max_array_bytes=1000)
    assert pickle.loads(pickle.dumps(decoder)).keywords == {"max_array_bytes": 1000}
    with _epoch_loader(root, num_workers=1, max_array_bytes=1000) as loader, \
            pytest.raises(SampleDecodeError, match=r"a\.npz \(member 'x'\) inflates .*max_array_bytes=1,000"):
        list(loader.epoch(0))
    assert resolve_decoder("npz") is decode_npz and resolve_decoder("auto") is decode_auto


def _patch_member_sizes(data: bytes, file_size: int, crc: int | None = None) -> bytes:
    """The zip ``data`` with its one member's recorded (uncompressed) size, and CRC, rewritten in both
    the local header and the central directory: a zip entry that lies about what it inflates to."""
    out = bytearray(data)
    local = out.index(b"PK\x03\x04")
    central = out.index(b"PK\x01\x02")
    struct.pack_into("<I", out, local + 22, file_size)
    struct.pack_into("<I", out, central + 24, file_size)
    if crc is not None:
        struct.pack_into("<I", out, local + 14, crc)
        struct.pack_into("<I", out, central + 16, crc)
    return bytes(out)


def test_a_member_header_declaring_more_than_the_recorded_size_is_refused_before_allocating(
        tmp_path: Path) -> None:
    """The zip records a small member; its .npy header says 2**30 float32 (4 GiB): refused from the
    sizes, never allocated (np.load allocated what the header said, then failed reading)."""
    member = _npy_bytes(_with_shape("(1073741824,)"), data=b"\0" * 64)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", member)
    root = _publish(tmp_path, {"a.npz": out.getvalue()})
    with _epoch_loader(root) as loader, pytest.raises(NpyHeaderError) as caught:
        list(loader.epoch(0))
    error = caught.value
    path = str(root / "epoch-0" / "train" / "a.npz")
    assert error.path == path and error.field == "shape" and error.value == (1073741824,)
    assert f"{path} (member 'x')" in str(error) and "holds 64 after the 128-byte header" in str(error)


def test_a_member_inflating_past_its_recorded_size_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    """The zip entry records a 16-byte array; the deflate stream holds 1 MiB more. The reader counts
    what it inflates: the member is refused, naming the file and the member, after at most one chunk."""
    honest = _npy_bytes(GOOD)
    real = honest + b"\0" * (1 << 20)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", real)
    lying = _patch_member_sizes(out.getvalue(), len(honest), crc=zlib.crc32(real))
    root = _publish(tmp_path, {"a.npz": lying})
    path = str(root / "epoch-0" / "train" / "a.npz")
    # Python's zip reader itself stops at the recorded size (then the CRC of the full data fails):
    with pytest.raises(ArraySampleError, match=r"a\.npz \(member 'x'\) cannot be read from the zip: BadZip"):
        decode_npz(path)
    # A zip reader that does not stop there is bounded by the reader's own count:
    real_open = zipfile.ZipFile.open

    def unbounded(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> io.BytesIO:
        real_open(self, name).close()
        return io.BytesIO(real)

    monkeypatch.setattr(zipfile.ZipFile, "open", unbounded)
    with _epoch_loader(root) as loader, pytest.raises(ArraySampleError) as caught:
        list(loader.epoch(0))
    assert str(caught.value) == (f"sample {path} (member 'x') inflates to more bytes than its zip entry "
                                 "records (a corrupt or forged zip)")


def test_a_bad_member_header_for_epoch_loader_names_the_field(tmp_path: Path) -> None:
    root = _publish(tmp_path, {"a.npz": _stored_npz(_with_shape("(4.7,)"))})
    with _epoch_loader(root) as loader, pytest.raises(NpyHeaderError) as caught:
        list(loader.epoch(0))
    path = str(root / "epoch-0" / "train" / "a.npz")
    assert caught.value.field == "shape" and caught.value.path == path
    assert f"{path} (member 'x')" in str(caught.value) and "(4.7,)" in str(caught.value)
    assert torch.Size([4]) == decode_npz(str(_write(tmp_path / "ok.npz", _stored_npz(GOOD))))["x"].shape


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
