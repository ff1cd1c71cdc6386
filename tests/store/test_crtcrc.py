"""awscrt's CRCs called straight from its shared library (``sidecar/store/crtcrc.py``): the same
values as ``awscrt.checksums``, no start of awscrt's module (whose aws-lc entropy seeding held
the GIL ~55 ms in the sampler's first hash), and the plain import where the direct call cannot
be checked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from epochfs.sidecar.store import crtcrc, digests

checksums = pytest.importorskip("awscrt.checksums")

SIZES = (0, 1, 9, 1000, 5 * 1024, 5 * 1024 + 1, 70_000, (1 << 20) + 3)


@pytest.mark.parametrize("name", ["crc64nvme", "crc32c"])
def test_direct_crcs_equal_awscrt(name: str) -> None:
    found = crtcrc.load()
    assert found is not None
    reference = getattr(checksums, name)
    for size in SIZES:
        data = os.urandom(size)
        assert found[name](data, 0) == reference(data)
        assert found[name](memoryview(data), 0) == reference(data)
        # chained over two blocks, as a hasher's updates are
        half = size // 2
        assert found[name](data[half:], found[name](data[:half], 0)) == reference(data)


def test_a_digest_does_not_start_awscrt() -> None:
    """A fresh process hashes a CRC64NVME and a CRC32C and ends with neither awscrt nor its
    native module imported (before, the first hash imported both)."""
    script = (
        "import sys\n"
        "from epochfs.sidecar.store import digests\n"
        "for a in ('crc64nvme', 'crc32c'):\n"
        "    h = digests.new_hasher(a); h.update(b'123456789'); print(a, h.digest().hex())\n"
        "print(sorted(m for m in sys.modules if 'awscrt' in m))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["crc64nvme ae8b14860a799888", "crc32c e3069283", "[]"]


def test_a_wrong_check_value_falls_back_to_awscrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(crtcrc.CHECK_VALUES, "crc32c", 0)
    assert crtcrc.load() is None
    digests._crt.cache_clear()
    try:
        h = digests.new_hasher("crc32c")
        h.update(b"123456789")
        assert h.digest().hex() == "e3069283"
    finally:
        digests._crt.cache_clear()


def test_a_library_without_the_functions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that renamed the entry points (here: a library that has none, libc) answers
    None, not an AttributeError in the first download."""

    class Spec:
        origin = "libc.so.6"

    monkeypatch.setattr(crtcrc.importlib.util, "find_spec", lambda name: Spec())
    assert crtcrc.load() is None
