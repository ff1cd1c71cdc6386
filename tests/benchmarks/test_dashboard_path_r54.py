"""``epochfs bench dashboard`` from an installed wheel names the flag that fixes it (r54).

Why: the wheel holds the Python packages and not the Helm chart, so the dashboard's default path
(beside ``benchmarks/`` in a checkout) is never there once installed; the refusal said only "no
dashboard at <site-packages path>". Real: this checkout built into a wheel, installed alone with
``pip install --target`` and run as ``epochfs bench dashboard`` with that folder first on the path
(the benchmark's own process too), from a folder outside the checkout. The refusal comes before the
benchmark needs root, /dev/fuse or Prometheus.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench_helpers import ROOT

RUN_CLI = ("import sys, epochfs; assert epochfs.__file__.startswith(sys.path[0]), epochfs.__file__; "
           "from epochfs.sidecar.cli import main; sys.exit(main())")


def installed_wheel(tmp_path: Path) -> Path:
    """This checkout as a user without a clone has it: the wheel, installed into a folder alone."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("epochfs-*.whl")
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return target


def bench_dashboard(target: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``epochfs bench dashboard --args ARGS`` with the installed copy first on every process's path."""
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, "-c", RUN_CLI, "bench", "dashboard", "--args", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_installed_dashboard_refusal_names_the_flag_and_the_charts_file(tmp_path: Path) -> None:
    target = installed_wheel(tmp_path)
    done = bench_dashboard(target, tmp_path)
    error = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stdout + done.stderr
    assert error.startswith("python -m epochfs.benchmarks.dashboard: error: no dashboard at "
                            f"{target.resolve()}/epochfs/helm/"), error
    assert "pass --dashboard PATH" in error and "helm/epochfs/dashboards/epochfs.json in the epochfs " \
        "repository" in error, error

    missing = tmp_path / "mine.json"
    done = bench_dashboard(target, tmp_path, "--dashboard", str(missing))
    error = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and error.endswith(
        f"error: --dashboard: no file at {missing}; the dashboard is helm/epochfs/dashboards/epochfs.json "
        "in the epochfs repository (a checkout, or the Helm chart's files)"), error
