"""``epochfs status`` tells the truth about the cache it reads (review r53).

Each test runs the real ``epochfs status`` on a real cache:

* a sampler killed with SIGKILL left its downloads in flight (and its backpressure) in the index,
  and ``--cache`` showed them for ever as the state now; the sampler's lock says no sampler runs;
* ``status.json`` empty, cut short or without the fields the view draws gave a traceback (exit 1);
* the supervisor's saved totals came out as floats (``20.0`` samples);
* a ``--capacity`` the cache's filesystem cannot hold was shown as the budget without a word, while
  the sampler samples within what the disk allows and skips the rest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from common import wait_until
from sampler_helpers import start_sampler

from epochfs.sidecar.store import Meta, Policy, Store
from epochfs.torchclient import layout


def _status(*args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    proc = subprocess.run([sys.executable, "-m", "epochfs.sidecar.cli", "status", *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def _json(*args: str) -> dict[str, object]:
    doc = json.loads(_status(*args, "--json").stdout)
    assert isinstance(doc, dict)
    return doc


def _dataset(root: Path, count: int = 120, size: int = 3000) -> Path:
    for i in range(count):
        (root / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 4}" / f"f{i:04d}.bin").write_bytes(os.urandom(size))
    return root


def test_a_killed_samplers_downloads_are_not_shown_as_in_flight(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "data")
    cache = tmp_path / "cache"
    # A slow rate keeps downloads in flight: their reservations are in the index.
    sp = start_sampler(cache, f"file://{data}", "--capacity", "2Mi", "--max-rate", "20Ki",
                       "--min-samples", "100")
    try:
        wait_until(lambda: int(str(sp.stats()["inflight_bytes"])) > 0, timeout=60,
                   what="downloads in flight")
        running = _json("--cache", str(cache))
        assert running["sampler_running"] is True
    finally:
        sp.stop(signal.SIGKILL)
    with Store(cache) as store:
        assert int(store.stats().inflight_bytes) > 0  # the dead sampler's last words stay...
        store.set_backpressure("cache full")  # ...as would a pause it was in
    doc = _json("--cache", str(cache))
    assert doc["sampler_running"] is False
    assert doc["inflight_bytes"] == 0 and doc["backpressure"] is False, doc
    text = _status("--cache", str(cache)).stdout
    assert "in flight" not in text.splitlines()[0] and "backpressure: YES" not in text, text
    assert "sampler: NOT RUNNING (no `epochfs sample` holds this cache's lock)" in text, text


def _bad_mount(tmp_path: Path, name: str, content: str) -> Path:
    folder = tmp_path / name
    (folder / layout.CONTROL_DIR).mkdir(parents=True)
    (folder / layout.CONTROL_DIR / layout.STATUS_NAME).write_text(content)
    return folder


def test_a_damaged_or_foreign_status_json_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cases = {
        "empty": ("", "is empty: not an epochfs status document"),
        "truncated": ('{"backpressure": false, "cache_bytes": 1', "is not JSON (Expecting"),
        "nofields": ("{}", "lacks cache_bytes, capacity_bytes, epochs: a status document of another"),
        "notobject": ("[1, 2]", "is not an epochfs status document (not a JSON object)"),
        "wrongkinds": ('{"cache_bytes": "1", "capacity_bytes": 2, "epochs": {}}',
                       "is not an epochfs status document (cache_bytes, epochs of another kind)"),
        # Numbers no sidecar writes (an exploratory bad-input run: tracebacks, exit 1):
        "nan": ('{"epochs": [], "cache_bytes": NaN, "capacity_bytes": 100}',
                "is not an epochfs status document (NaN where a number is)"),
        "huge": ('{"epochs": [], "cache_bytes": 1e400, "capacity_bytes": 100}',
                 "is not an epochfs status document (1e400, a number out of range)"),
        "epochrow": ('{"epochs": [{"epoch": "x", "samples": null}], "cache_bytes": 1, "capacity_bytes": 100}',
                     "is not an epochfs status document (epochs of another kind)"),
    }
    for name, (content, words) in cases.items():
        folder = _bad_mount(tmp_path, name, content)
        proc = _status("--mount", str(folder), rc=2)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, (name, proc.stderr)
        assert proc.stderr.startswith(f"epochfs status: --mount: {folder}/"), proc.stderr


def test_a_document_missing_optional_fields_is_drawn(tmp_path: Path) -> None:
    """Another version's document with the fields the view needs and no others is shown."""
    doc = {"cache_bytes": 10, "capacity_bytes": 100, "epochs": [{"epoch": 3}]}
    folder = _bad_mount(tmp_path, "older", json.dumps(doc))
    text = _status("--mount", str(folder)).stdout
    assert "cache [" in text and "samples ?" in text and "     3" in text, text


def test_the_supervisors_counts_are_ints(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=1))
        store.set_meta(Meta.SIDECAR_TOTALS, json.dumps({
            "served_samples_total": 20.0, "served_bytes_total": 4096.0,
            "client_samples_total": 20.0, "client_wait_seconds_total": 1.5}))
    doc = _json("--cache", str(cache))
    for key in ("served_samples_total", "served_bytes_total", "client_samples_total"):
        assert doc[key] == 20 or doc[key] == 4096
        assert type(doc[key]) is int, (key, doc[key])
    assert doc["client_wait_seconds_total"] == 1.5
    assert '"served_samples_total": 20,' in _status("--cache", str(cache), "--json").stdout
