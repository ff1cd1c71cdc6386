"""``epochfs bench fetch --tools ...,python-floor``: the least a Python process does for a durable,
checked fetch (:mod:`epochfs.benchmarks._fetch_floor`) runs in turn with the other tools against
the same moto server, fetches and checks every object of both stored-checksum sets, and is
reported against the other tools; a body that does not match its stored checksum fails it.
Toy sizes; no timed assertion."""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path

import pytest

from epochfs.benchmarks import _fetch_floor, fetch


def test_the_python_floor_runs_as_a_tool_and_is_reported(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc = fetch.main(["--large", "3", "--large-size", "8192", "--small", "2", "--small-size", "5000",
                     "--repeat", "1", "--tools", "epochfs,python-floor,s5cmd", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    for checksum in ("crc64nvme", "md5"):
        assert re.search(rf"^  small +{checksum} +python-floor +run 0: ", out, re.M), out
    assert re.search(r"^large: python-floor \(list, GET, CRC, direct write and fsync alone, in a fresh "
                     r"process\) / s5cmd = \d+\.\d\dx end to end", out, re.M), out
    assert re.search(r"^large \(bytes/s\): epochfs / python-floor = ", out, re.M), out
    assert "python-floor / python-floor" not in out, out


class Answer:
    """What :class:`_fetch_floor.Check` reads of an HTTP answer: its headers."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = {k.lower(): v for k, v in headers.items()}

    def getheader(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def crc64(body: bytes) -> str:
    crcs = _fetch_floor.crtcrc.load()
    if crcs is None:
        pytest.skip("awscrt's CRC functions cannot be loaded here")
    return base64.b64encode(crcs["crc64nvme"](body, 0).to_bytes(8, "big")).decode()


@pytest.mark.parametrize("kind", ["crc64nvme", "md5"])
def test_a_body_is_checked_against_what_is_stored(kind: str) -> None:
    body = b"epochfs" * 1000
    stored = ({"x-amz-checksum-crc64nvme": crc64(body)} if kind == "crc64nvme"
              else {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})
    crcs = _fetch_floor.crtcrc.load()
    assert crcs is not None
    for sent, matches in ((body, True), (body[:-1] + b"!", False)):
        check = _fetch_floor.Check(Answer(stored), crcs)  # type: ignore[arg-type]
        check.update(memoryview(sent))
        assert check.algorithm == kind
        assert check.matches() is matches


def test_an_object_without_a_checksum_it_can_check_is_refused() -> None:
    crcs = _fetch_floor.crtcrc.load()
    assert crcs is not None
    with pytest.raises(RuntimeError, match="no plain md5"):
        _fetch_floor.Check(Answer({"ETag": '"0123-2"'}), crcs)  # type: ignore[arg-type]


def test_its_epochfs_modules_are_loaded_without_their_packages() -> None:
    """The floor pays for the two modules it uses, not for the store and remote packages."""
    import subprocess

    code = ("import sys, epochfs.benchmarks._fetch_floor; "
            "print(sorted(m for m in sys.modules if m.startswith('epochfs')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["epochfs", "epochfs.benchmarks", "epochfs.benchmarks._fetch_floor",
                         "epochfs.sidecar.remote.sigv4", "epochfs.sidecar.store.crtcrc"], out
