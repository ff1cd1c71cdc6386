"""``make demo`` runs examples/demo.py: the whole mission end to end, also when interrupted."""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

import pytest
from common import ROOT, wait_until

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

EPOCH_LINE = re.compile(r"^epoch (\d+): +(\d+) samples \((\d+) new, (\d+) left out\)  "
                        r"cache +[\d.]+/[\d.]+ MiB \( *(\d+)%\) .* loss \d\.\d+$", re.MULTILINE)
"""One line the demo prints per epoch: number, samples, new, left out, cache occupancy (%)."""

HEADROOM = 0.25
"""The sidecar's default --headroom, which the demo keeps: an epoch holds at most 75% of the cache."""


def _extra(name: str) -> set[str]:
    """The distributions an extra of pyproject.toml names (normalized, versions dropped)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
            for requirement in project["optional-dependencies"][name]}


def not_in_the_demo_extra() -> list[str]:
    """The top-level modules of the sidecar extra's distributions that the demo extra leaves out
    (botocore, awscrt, aiohttp, kubernetes): `make demo` without the dev venv has none of them."""
    left_out = _extra("sidecar") - _extra("demo")
    modules = importlib.metadata.packages_distributions()
    return sorted(m for m, dists in modules.items()
                  if any(d.lower().replace("_", "-") in left_out for d in dists) and m.isidentifier())


BLOCKER = """import sys
class _NotInstalled:
    # The demo extra's venv: these modules are not installed (tests/sidecar/test_demo.py).
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the demo extra)", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def start_demo(workdir: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """The demo as ``make demo`` runs it in its own venv: the modules the demo extra leaves out
    cannot be imported, in the demo and every process it starts (a sitecustomize on PYTHONPATH)."""
    log = workdir / "demo.log"
    site = workdir / "demo-extra-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(not_in_the_demo_extra())))
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", str(ROOT / "examples" / "demo.py"), "--workdir", str(workdir), *args],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": path},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    return proc, log


def test_the_demo_extra_leaves_out_what_only_s3_http_and_pods_need() -> None:
    """`make demo`'s venv is the demo extra alone: the sidecar extra's S3, HTTP and Kubernetes
    clients are not in it, and the demo's runs in this module cannot import them."""
    assert {"botocore", "aiohttp", "kubernetes", "awscrt"} <= set(not_in_the_demo_extra())
    assert {"fsspec", "mfusepy", "prometheus-client", "torch"} <= _extra("demo")


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mounts") as f:
        return [line for line in f if str(path) in line]


def check_the_readme_story(text: str, epochs: int) -> None:
    """What the README says ``make demo`` shows: epochs grow until the cache is full, then the oldest
    samples turn over, epoch after epoch. Read from the demo's own epoch lines; an AssertionError
    says which part failed.

    * every epoch is there, and epoch 0 is cut before the cache fills (it is smaller than the last);
    * until the first epoch that leaves samples out (the turnover), each epoch leaves nothing out and
      is larger than the one before (they grow);
    * some epoch after epoch 0 turns over: it leaves samples of the epoch before out and takes new
      ones, with the cache full (at least the epoch budget, 1 - headroom, in use);
    * from then on every epoch holds the epoch budget: the same number of (equally sized) samples;
    * the turnover goes on: at least two of the last three epochs take new samples in place of
      ones they leave out (a full cache whose old samples are never evicted repeats one epoch's
      samples with "0 new, 0 left out" for good; one such epoch among three is tolerated, the
      pace of a loaded machine).
    """
    lines = [tuple(map(int, m)) for m in EPOCH_LINE.findall(text)]
    assert [e[0] for e in lines] == list(range(epochs)), f"not one line per epoch:\n{text}"
    sizes = [e[1] for e in lines]
    assert 64 <= sizes[0] < sizes[-1], f"epoch 0 was not cut before the cache filled:\n{text}"
    turnover = next((i for i, e in enumerate(lines) if e[3] > 0), None)
    assert turnover is not None and turnover >= 1, f"no epoch turned over:\n{text}"
    for before, epoch in itertools.pairwise(lines[:turnover]):
        assert epoch[3] == 0 and epoch[1] > before[1], f"epoch {epoch[0]} did not grow:\n{text}"
    first = lines[turnover]
    assert first[2] > 0, f"epoch {first[0]} left samples out but took no new ones:\n{text}"
    assert first[4] >= 100 * (1 - HEADROOM), \
        f"epoch {first[0]} turned over before the cache was full:\n{text}"
    assert sizes[turnover:] == [sizes[turnover]] * (epochs - turnover), f"full epochs differ in size:\n{text}"
    turned = [e[0] for e in lines[-3:] if e[2] > 0 and e[3] > 0]
    assert len(turned) >= 2, \
        f"the turnover stopped: only epochs {turned} of the last three took new samples:\n{text}"


@pytest.mark.long
def test_demo_trains_over_epochs_that_grow_then_turn_over_and_unmounts(tmp_path: Path) -> None:
    """The README's story, as ``make demo`` runs it (its defaults) with two epochs more: 4000
    samples (17 MiB) through a 6 MiB cache at 2 MiB/s, training paced at half that
    (examples/demo.py, --train-rate); epoch 0 has ~100 samples, each epoch about triples, the cache
    is full by epoch 2 or 3, and the epochs after it keep turning over: a full epoch (~4.5 s)
    outlasts half the delay before the samples it left out can go (the mount's 5 s margin for a
    held epoch and the demo's 1 s retire grace). The headroom alone gives the first two full epochs
    new samples, evicted or not; the last three of eight come after it is spent, so they take new
    samples only where old ones are evicted in time."""
    proc, log = start_demo(tmp_path, "--epochs", "8")
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
    text = log.read_text()
    check_the_readme_story(text, 8)
    assert "sidecar exited with 0; mount gone" in text
    assert not mounts_under(tmp_path)


@pytest.mark.long
def test_ctrl_c_stops_the_sidecar_cleanly(tmp_path: Path) -> None:
    proc, log = start_demo(tmp_path, "--samples", "800", "--epochs", "1000")
    wait_until(lambda: "epoch 1:" in log.read_text() or proc.poll() is not None, timeout=120,
               what="the demo's second epoch")
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
    assert proc.wait(timeout=60) == 130, log.read_text()[-3000:]
    assert "demo: sidecar exited with 0; mount gone" in log.read_text()
    assert not mounts_under(tmp_path)


def test_the_readmes_sample_output_tells_the_story_the_demo_is_checked_for() -> None:
    """The README's sample output of ``make demo`` (from a real run) passes the same check as the
    demo run above: six epochs that grow, then turn over with the cache full, and a clean end;
    and, as its text says, every epoch from the first turnover on takes new samples."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme[readme.index("    epoch 0: "):readme.index("mount gone", readme.index("    epoch 0: "))]
    sample = "\n".join(line.removeprefix("    ") for line in block.splitlines())  # an indented block
    check_the_readme_story(sample, 6)
    lines = [tuple(map(int, m)) for m in EPOCH_LINE.findall(sample)]
    turnover = next(i for i, e in enumerate(lines) if e[3] > 0)
    assert all(e[2] > 0 and e[3] > 0 for e in lines[turnover:]), sample
    assert "demo: sidecar exited with 0; mount gone" in readme
    # Made-up misses are found: an epoch that did not grow, and a turnover that stopped.
    with pytest.raises(AssertionError, match="did not grow"):
        check_the_readme_story(sample.replace("epoch 1:   320 samples", "epoch 1:    90 samples"), 6)
    stalled = re.sub(r"epoch ([45]): +1027 samples \(171 new, 171 left out\)",
                     r"epoch \1:  1027 samples (0 new, 0 left out)", sample)
    with pytest.raises(AssertionError, match="the turnover stopped"):
        check_the_readme_story(stalled, 6)
