"""A child killed by a signal is said as such in the supervisor's log: "sampler exited with status
-9" (Popen's status) said nothing of a signal, nor of the OOM killer that sends SIGKILL at the
container's memory limit. The real sidecar's line is checked in test_orphans_reaped.py and
test_fuse_refusal_stops.py (a kill -9 of each child)."""

from __future__ import annotations

from epochfs.sidecar.supervisor.reaper import exit_words


def test_an_exit_status_and_a_signal_are_said_apart() -> None:
    assert exit_words(2) == "exited with status 2"
    assert exit_words(0) == "exited with status 0"
    assert exit_words(-9) == ("was killed by signal 9 (SIGKILL: a kill from outside, or the kernel's "
                              "OOM killer at the memory limit)")
    assert exit_words(-15) == "was killed by signal 15 (SIGTERM)"
    assert exit_words(-200).startswith("was killed by signal 200 (")
