"""The torch client's waiting line says why no data comes: the sidecar's sampler cannot reach the
remote (``sampler_retrying`` in the mount's status.json, issue 21), on a plain folder with the
mount's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epochfs.torchclient.describe import describe_root
from epochfs.torchclient.waiting import wait_for_epoch

LINE = ("remote unreachable: cannot list s3://b: ConnectionRefusedError: [Errno 111] Connection refused; "
        "retry 3 in 8 s")


def _root(tmp_path: Path, **extra: object) -> Path:
    root = tmp_path / "mnt"
    (root / ".epochfs").mkdir(parents=True)
    status = {"samples": 0, "cache_bytes": 0, "capacity_bytes": 10**6, "pending_cuts": [0],
              "first_epoch": {"samples": 0, "target": 200}, **extra}
    (root / ".epochfs" / "status.json").write_text(json.dumps(status))
    return root


def test_the_waiting_line_and_the_timeout_say_the_remote_is_unreachable(tmp_path: Path) -> None:
    root = _root(tmp_path, sampler_retrying=LINE)
    assert describe_root(root) == ("no epoch folders yet; sidecar: epoch 0: 0/200 samples cached (0%), "
                                   f"0 B of 1.0 MB, pending cuts [0]; sampler: {LINE}")
    lines: list[str] = []
    with pytest.raises(TimeoutError, match="sampler: remote unreachable: cannot list s3://b"):
        wait_for_epoch(root, 0, timeout=0.1, progress=lines.append, sidecar_url=None)
    assert lines and lines[0].startswith("epochfs: waiting for epoch 0 under ")
    assert lines[0].endswith(f"; sampler: {LINE})"), lines[0]


def test_no_line_when_the_sampler_is_not_retrying(tmp_path: Path) -> None:
    cases: list[dict[str, object]] = [{}, {"sampler_retrying": ""}, {"sampler_retrying": None}]
    for i, extra in enumerate(cases):
        root = _root(tmp_path / str(i), **extra)
        assert "sampler:" not in describe_root(root)


def test_the_second_waiting_line_says_when_epoch_0_comes(tmp_path: Path) -> None:
    """wait_for_epoch keeps its readings between lines: samples come between the first line and
    the second (written by the progress callback itself, so no timing), and the second says when
    epoch 0 comes at that rate."""
    root = _root(tmp_path)
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if len(lines) == 1:
            status = json.loads((root / ".epochfs" / "status.json").read_text())
            status["samples"] = status["first_epoch"]["samples"] = 50
            (root / ".epochfs" / "status.json").write_text(json.dumps(status))

    with pytest.raises(TimeoutError):
        wait_for_epoch(root, 0, timeout=0.3, progress=progress, progress_every=0.05, sidecar_url=None)
    assert len(lines) >= 2, lines
    assert "0/200 samples cached (0%), 0 B" in lines[0] and " s at " not in lines[0], lines[0]
    assert "50/200 samples cached (25%), ~" in lines[1] and " samples/s" in lines[1], lines[1]


def test_the_waiting_line_and_the_timeout_say_the_listing_found_nothing(tmp_path: Path) -> None:
    """A prefix that matches nothing: the sidecar knows (status.json's ``listing.warning``) and the
    trainer's waiting line and timeout say it, not only "0/1 samples cached" for ten minutes."""
    warning = "0 objects under s3://bucket/nomatch for this node: check --remote's prefix"
    root = _root(tmp_path, listing={"complete": True, "warning": warning})
    assert describe_root(root).endswith(f"; listing: {warning}"), describe_root(root)
    with pytest.raises(TimeoutError, match="listing: 0 objects under s3://bucket/nomatch"):
        wait_for_epoch(root, 0, timeout=0.1, progress=lambda line: None, sidecar_url=None)
    assert "listing:" not in describe_root(_root(tmp_path / "quiet", listing={"complete": True}))
