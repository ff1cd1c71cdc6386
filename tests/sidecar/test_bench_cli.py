"""`epochfs bench` runs the benchmarks of the installed package (``epochfs.benchmarks``), from any
folder: through the console script of this environment and from a wheel, never from a checkout's
benchmarks/ folder. A missing dependency stops a benchmark at once with a line naming the extra.

The real benchmarks run here at toy sizes (seconds): their numbers mean nothing, their output format
and clean-up do. The longer ones (a moto server, a FUSE mount) are marked slow.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from bench_helpers import ROOT, bench, decoy

BENCHMARKS = ("arrayloader", "dashboard", "fairness", "fairness_floor", "fetch", "fleet", "folderview",
              "fuse_memory", "images", "loader", "members_files", "mount", "scale",
              "scale_cached", "served_opens")

# Put first on sys.path (PYTHONPATH), this makes the named modules look absent to every process.
HIDE = """
import sys

class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {names!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Hide())
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fanotify (served_opens) and FUSE need root")






def served_opens_args(folder: Path) -> list[str]:
    return ["--args", "--dir", str(folder / "files"), "--files", "40", "--repeat", "1"]


def check_served_opens(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode == 1 and "fanotify unavailable" in result.stderr:
        pytest.skip("fanotify is not available here")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["== epochfs bench served_opens",
                         "40 files of 65536 B, page cache warm, 1 pass each side, interleaved; "
                         "medians [min-max]:"]
    assert re.fullmatch(r"  unwatched: +\d+ opens/s  \(\d+ MB/s\)", lines[2]), lines[2]
    assert re.fullmatch(r"  watched / unwatched throughput: \d+\.\d\d; cost per open: -?\d+\.\d us", lines[4])
    assert re.fullmatch(r"  opens counted: \d+ of 40", lines[5]), lines[5]


def test_help_lists_the_installed_benchmarks(tmp_path: Path) -> None:
    result = bench("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed = re.search(r"which: ([\w, ]+) \(default: ([\w, ]+)\)", " ".join(result.stdout.split()))
    assert listed is not None, result.stdout
    assert listed.group(1).split(", ") == list(BENCHMARKS)  # found in the package; not the harness
    assert listed.group(2).split(", ") == ["fetch", "mount", "loader"]


def test_an_unknown_name_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    result = bench("fetch", "nosuch", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""  # refused before any benchmark ran
    assert f"unknown benchmark 'nosuch' (known: {', '.join(BENCHMARKS)})" in result.stderr


@needs_root
def test_served_opens_runs_from_outside_the_checkout(tmp_path: Path) -> None:
    check_served_opens(bench("served_opens", *served_opens_args(tmp_path), cwd=decoy(tmp_path)))


@pytest.mark.parametrize(("name", "hidden", "args", "named"), [
    ("loader", "torch", ["--samples", "4"], "torch"),
    ("arrayloader", "torch", ["--mb", "1", "--no-cold"], "torch"),
    ("fetch", "moto", ["--tools", "epochfs", "--large", "1", "--small", "1"], "moto[server]"),
])
def test_a_missing_dependency_names_the_extra(tmp_path: Path, name: str, hidden: str, args: list[str],
                                              named: str) -> None:
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE.format(names={hidden}))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hide")}
    result = bench(name, "--args", *args, cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"epochfs bench: needs {named}, not installed here: pip install 'epochfs[bench]'")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_the_wheel_holds_the_benchmarks_and_runs_them(tmp_path: Path) -> None:
    """Built from a copy of the sources (src/epochfs/benchmarks is a symlink like the others) and
    unpacked (a pure wheel installs by unpacking): the installed copy lists and runs them."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("sidecar", "fuse", "torchclient", "benchmarks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "src", src / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(src)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("epochfs-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"epochfs/benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.py")}
    assert {f"epochfs/benchmarks/{n}.py" for n in ("__init__", "harness", *BENCHMARKS)} <= expected <= names
    assert not any(n.startswith("benchmarks/") for n in names)

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}  # first on sys.path: before the editable install
    cwd = decoy(tmp_path / "elsewhere")
    probe = "import epochfs.benchmarks.harness as h; print(h.__file__)"
    where = subprocess.run([sys.executable, "-P", "-c", probe], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    cli = [sys.executable, "-P", "-m", "epochfs.sidecar.cli", "bench"]
    shown = subprocess.run([*cli, "--help"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "served_opens" in shown.stdout, shown.stderr
    if os.geteuid() == 0:
        check_served_opens(subprocess.run([*cli, "served_opens", *served_opens_args(tmp_path)], cwd=cwd,
                                          env=env, capture_output=True, text=True, timeout=120))


@pytest.mark.slow
def test_fetch_runs_against_moto(tmp_path: Path) -> None:
    tools = "epochfs,s5cmd" + (",rclone" if shutil.which("rclone") else "")
    result = bench("fetch", "--args", "--large", "2", "--large-size", "65536", "--small", "6",
                   "--small-size", "4096", "--repeat", "1", "--tools", tools, "--dir", str(tmp_path),
                   cwd=decoy(tmp_path / "elsewhere"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^dataset +tool +seconds +MB/s +obj/s first GET s +first object GET s +moto CPU  "
                     r"client CPU s", out, re.M), out
    assert re.search(r"^small \(objects/s\): epochfs / s5cmd = \d+\.\d\dx end to end", out, re.M), out
    assert not list(tmp_path.glob("epochfs-fetch-*"))  # the scratch folder is gone


@pytest.mark.slow
@needs_root
def test_mount_runs_and_leaves_nothing_mounted(tmp_path: Path) -> None:
    if not Path("/dev/fuse").exists():
        pytest.skip("no /dev/fuse")
    work = tmp_path / "work"
    result = bench("mount", "--args", "--dir", str(work), "--big", "2", "--small", "8", "--procs", "1",
                   "--repeat", "1", "--pace", "0", cwd=decoy(tmp_path / "elsewhere"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^ 64KiB x8 +procs=1 +direct cold .* repeat +\d+ \(\d+\.\d\dx\)$", result.stdout, re.M)
    assert "mount server Python calls (64KiB): {" in result.stdout
    assert not work.exists()
    assert str(work) not in Path("/proc/self/mountinfo").read_text()
