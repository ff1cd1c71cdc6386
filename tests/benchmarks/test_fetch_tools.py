"""``epochfs bench fetch --tools``: each tool runs once per round, so the runs pair up one to one
(``--tools epochfs,s5cmd,epochfs-base --baseline-src DIR`` ran epochfs-base twice a round and
ended in "zip() argument 2 is longer than argument 1" after all its runs)."""

from __future__ import annotations

from epochfs.benchmarks.fetch import tool_list


def test_a_tool_named_twice_runs_once() -> None:
    assert tool_list("epochfs,s5cmd,epochfs", baseline=False) == ["epochfs", "s5cmd"]


def test_the_baseline_named_or_not_runs_once_after_epochfs() -> None:
    assert tool_list("epochfs,s5cmd,epochfs-base", baseline=True) == ["epochfs", "s5cmd", "epochfs-base"]
    assert tool_list("s5cmd,epochfs", baseline=True) == ["s5cmd", "epochfs", "epochfs-base"]
    assert tool_list("s5cmd", baseline=True) == ["epochfs-base", "s5cmd"]
