"""Orphans reaped by the supervisor: ``epochfs sidecar`` for real, its sampler killed with -9.

In the image the supervisor is PID 1, so every orphan of the pod comes to it: the sampler's listing
child first (it dies with the sampler, ``PR_SET_PDEATHSIG``), one per sampler crash. Unreaped, each
would stay a zombie for the pod's life. The supervisor makes itself a child subreaper, so orphans
come to it here too (not PID 1), reaps them and says so in its log, one line each; its own
children's exits stay Popen's to read (the sampler's ``-9`` recorded, a restart counted).

The folder view with a ``file://`` remote: no mount, no privilege, no S3 server.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import folder_sidecar, owned_dir, write_remote
from sidecar_helpers import Sidecar

from epochfs.sidecar import metrics

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc"),
    pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                       reason="needs setpriv to drop root"),
]


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid`` from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def children_of(parent: int) -> list[int]:
    """Every process whose parent is ``parent`` (a scan of /proc: zombies included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := stat_of(int(entry))) is not None and stat[1] == parent:
            found.append(int(entry))
    return found


def zombies_of(parent: int) -> list[int]:
    return [pid for pid in children_of(parent) if (stat := stat_of(pid)) is not None and stat[0] == "Z"]


def listing_child(sampler: int) -> int | None:
    """The sampler's child that runs the listing (it names itself once it has its settings)."""
    for pid in children_of(sampler):
        try:
            if Path(f"/proc/{pid}/comm").read_bytes().rstrip(b"\n") == metrics.LISTING_NAME:
                return pid
        except OSError:
            continue
    return None


def kill_sampler_with_its_listing(car: Sidecar, round_: int) -> tuple[int, int]:
    """Wait until the sampler runs its listing child, SIGKILL the sampler; (sampler, listing)."""
    def running() -> tuple[int, int] | None:
        sampler = car.child_pid("sampler")
        listing = listing_child(sampler) if sampler is not None else None
        return (sampler, listing) if sampler is not None and listing is not None else None

    sampler, listing = wait_until(running, timeout=60, what=f"round {round_}: the sampler's listing child")
    os.kill(sampler, signal.SIGKILL)
    return sampler, listing


def test_listing_child_orphaned_by_a_killed_sampler_is_reaped_by_the_supervisor() -> None:
    objects = random_objects(300, 512, prefix="")  # spread over folders: more than one list page
    objects = {f"class{i % 6}/{key}": body for i, (key, body) in enumerate(objects.items())}
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, objects)
        # No relist, so the listing child waits for a request and lives as long as its sampler.
        with folder_sidecar(base, remote, extra=("--min-samples", "5", "--list-process", "1")) as car:
            supervisor = car.proc.pid
            for round_ in (1, 2):  # each crash leaves one orphan; none may pile up
                sampler, listing = kill_sampler_with_its_listing(car, round_)
                reaped = re.compile(rf"reaped orphan pid {listing} .*")
                line = wait_until(lambda: reaped.search(car.log_text()), timeout=20,  # noqa: B023
                                  what=f"round {round_}: the supervisor reaping listing child {listing}")
                print(line.group(0))  # the orphan's name and how it ended (-s shows it)
                # The sampler itself is the supervisor's child: Popen reaped it, with its status.
                wait_until(lambda: car.child_pid("sampler") not in (None, sampler), timeout=20,  # noqa: B023
                           what=f"round {round_}: the sampler restarted")
                killed = r"sampler was killed by signal 9 \(SIGKILL[^)]*\) after"
                assert len(re.findall(killed, car.log_text())) == round_
                assert car.metric("epochfs_child_restarts_total", child="sampler") == round_
                wait_until(lambda: not zombies_of(supervisor), timeout=10,
                           what="no zombie child of the supervisor")
            assert car.health()["code"] == 200
