"""awscrt's CRCs called straight from its shared library (``sidecar/store/crtcrc.py``): the same
values as ``awscrt.checksums``, no start of awscrt's module (whose aws-lc entropy seeding held
the GIL ~55 ms in the sampler's first hash), and the plain import where the direct call cannot
be checked."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar.store import crtcrc, digests

checksums = pytest.importorskip("awscrt.checksums")

ROOT = Path(__file__).resolve().parents[2]
SIZES = (0, 1, 9, 1000, 5 * 1024, 5 * 1024 + 1, 70_000, (1 << 20) + 3)

DIRECT = """
import json, random, sys
from epochfs.sidecar.store import crtcrc
found = crtcrc.load()
rng = random.Random(66)
out = []
for size in SIZES:
    data = rng.randbytes(size)
    half = size // 2
    for name, fn in sorted(found.items()):
        view = memoryview(bytearray(data))[:size]
        out.append([name, size, fn(data, 0), fn(view, 0), fn(data[half:], fn(data[:half], 0))])
print(json.dumps({"crcs": out, "awscrt": sorted(m for m in sys.modules if "awscrt" in m)}))
"""


def test_direct_crcs_equal_awscrt() -> None:
    """The direct calls, made in a process where awscrt's module never started (as in the
    sampler), give awscrt's values: plain bytes, a writable buffer's view, chained updates."""
    out = subprocess.run(
        [sys.executable, "-c", f"SIZES = {SIZES!r}\n" + DIRECT], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert got["awscrt"] == []
    rng = random.Random(66)
    expected = []
    for size in SIZES:
        data = rng.randbytes(size)
        for name in ("crc32c", "crc64nvme"):
            value = getattr(checksums, name)(data)
            expected.append([name, size, value, value, value])
    assert got["crcs"] == expected


def test_the_installed_and_the_images_awscrt_are_checked_releases() -> None:
    """A new awscrt (here or in the image's pin) must be checked against the direct call and added
    to ``TESTED``; until then the sampler imports awscrt (slower to start, never wrong)."""
    import awscrt

    site = Path(awscrt.__file__).resolve().parents[1]
    assert crtcrc.installed_release(site) in crtcrc.TESTED
    pins = re.findall(r"^awscrt==(\d+)\.(\d+)", (ROOT / "docker" / "constraints.txt").read_text(), re.M)
    assert [(int(a), int(b)) for a, b in pins] and all((int(a), int(b)) in crtcrc.TESTED for a, b in pins)


def test_a_release_not_checked_is_imported_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crtcrc, "TESTED", ())
    assert crtcrc.load() is None


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
    monkeypatch.setattr(crtcrc, "installed_release", lambda site: crtcrc.TESTED[0])
    assert crtcrc.load() is None
