"""How epochfs is packaged and installed, as developers, static tools and the image see it.

- ``epochfs.__version__`` and ``epochfs --version`` give pyproject.toml's version, from the repository
  root and from any other folder (no ``epochfs/`` folder in the root may shadow the package);
- the package resolves through plain ``sys.path`` entries, which mypy and pyright follow (no import
  hook), and a module added to a source folder is importable at once, without reinstalling;
- a wheel holds every module of the three source folders, subpackages included.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

import epochfs

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("sidecar", "fuse", "torchclient")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
EPOCHFS = Path(sys.executable).with_name("epochfs")

# Imports with the standard path finder alone: what a static tool, which runs no import hook, sees.
PLAIN_IMPORT = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if f.__module__.startswith("_frozen_importlib")]
sys.path_hooks[:] = [h for h in sys.path_hooks if getattr(h, "__module__", "").startswith(
    ("_frozen_importlib", "zipimport"))]
sys.path_importer_cache.clear()
import epochfs, epochfs.sidecar.cli, epochfs.fuse.view, epochfs.torchclient.layout
print(epochfs.__version__)
print(epochfs.__file__)
"""


def test_version_is_pyprojects() -> None:
    assert epochfs.__version__ == importlib.metadata.version("epochfs") == VERSION


def test_no_epochfs_folder_in_the_repository_root() -> None:
    """A process whose working folder is the root (`python -c`, the supervisor's children) would
    import such a folder instead of the installed package."""
    assert not (ROOT / "epochfs").exists()


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_installed_package_and_version_from_any_folder(where: str, tmp_path: Path) -> None:
    cwd = ROOT if where == "root" else tmp_path
    result = subprocess.run([sys.executable, "-c", PLAIN_IMPORT], cwd=cwd, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    version, init = result.stdout.splitlines()
    assert version == VERSION
    assert Path(init).resolve() == Path(epochfs.__file__).resolve()
    assert not Path(init).is_relative_to(cwd / "epochfs")

    shown = subprocess.run([str(EPOCHFS), "--version"], cwd=cwd, capture_output=True, text=True,
                           timeout=60)
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"epochfs {VERSION}\n", "")


def test_a_new_module_is_importable_without_reinstalling() -> None:
    """Editable installs only: the path entry reaches the source folders themselves."""
    if not Path(epochfs.__file__).resolve().is_relative_to(ROOT):
        pytest.skip("epochfs is installed from a wheel, not from this tree")
    module = ROOT / "torchclient" / "_packaging_probe.py"
    module.write_text("VALUE = 42\n")
    try:
        result = subprocess.run(
            [sys.executable, "-c", PLAIN_IMPORT + "import epochfs.torchclient._packaging_probe as m\n"
             "print(m.VALUE)"],
            cwd=ROOT.parent, capture_output=True, text=True, timeout=60)
    finally:
        module.unlink()
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "42", result.stderr


def _source_copy(tmp_path: Path) -> Path:
    """The checkout's package sources copied to ``tmp_path/src``: a wheel is built from the copy,
    never from the checkout, where another test of this file puts a probe module for a moment
    (``pip wheel`` of the checkout failed when the probe went during its build, under xdist)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    for name in FOLDERS:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "src", src / "src", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


def test_the_wheel_holds_every_module(tmp_path: Path) -> None:
    """Subpackages (sidecar/store/, sidecar/sampler/, ...) are found, not listed by hand."""
    src = _source_copy(tmp_path)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(src)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("epochfs-*.whl")
    assert wheel.name.startswith(f"epochfs-{VERSION}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"epochfs/__init__.py", "epochfs/py.typed"}
    for folder in FOLDERS:
        expected |= {f"epochfs/{folder}/{p.relative_to(ROOT / folder).as_posix()}"
                     for p in (ROOT / folder).rglob("*") if p.suffix == ".py" or p.name == "py.typed"}
    assert expected <= names, sorted(expected - names)
    assert not any(n.startswith(("sidecar/", "fuse/", "torchclient/", "src/")) for n in names)


def test_the_built_wheel_installed_alone_runs_a_short_sample(tmp_path: Path) -> None:
    """What a user without a clone gets: the wheel installed by itself (``pip install --target``,
    nothing of this checkout on the path: ``python -I``, the wheel's folder first), whose
    ``epochfs --version`` names this version and whose sampler fetches a small file:// dataset
    and is stopped cleanly (issue 21, "Install")."""
    import json
    import signal

    from common import wait_until

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(_source_copy(tmp_path))],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("epochfs-*.whl")
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    run_cli = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import epochfs; "
               "assert epochfs.__file__.startswith(sys.path[0]), epochfs.__file__; "
               "from epochfs.sidecar.cli import main; sys.exit(main())")

    def cli(*args: str) -> list[str]:
        return [sys.executable, "-I", "-c", run_cli, str(target), *args]

    version = subprocess.run(cli("--version"), capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and VERSION in version.stdout, version.stdout + version.stderr
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):
        (data / f"{i:02d}.bin").write_bytes(bytes([i]) * 1000)
    cache = tmp_path / "cache"
    sampler = subprocess.Popen(cli("sample", "--remote", f"file://{data}", "--cache", str(cache)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def fetched() -> bool:
            status = subprocess.run(cli("status", "--cache", str(cache), "--json"), capture_output=True,
                                    text=True, timeout=60)
            return status.returncode == 0 and json.loads(status.stdout)["samples"] == 12

        wait_until(lambda: sampler.poll() is not None or fetched(), timeout=60, what="12 samples fetched")
        assert sampler.poll() is None, sampler.communicate()[0]
    finally:
        sampler.send_signal(signal.SIGTERM)
        out = sampler.communicate(timeout=30)[0]
    assert sampler.returncode == 0 and "Traceback" not in out, out


def test_make_image_builds_the_name_the_chart_pulls() -> None:
    """The chart's default image (values.yaml image.repository, tag = appVersion) existed nowhere:
    `make image` builds exactly that name, so a push of it is what `helm install` pulls."""
    import yaml

    values = yaml.safe_load((ROOT / "helm" / "epochfs" / "values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "helm" / "epochfs" / "Chart.yaml").read_text())
    want = f"{values['image']['repository']}:{chart['appVersion']}"
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    dry = subprocess.run([make, "-n", "-s", "image"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"-t {want} ." in dry.stdout, dry.stdout
    other = subprocess.run([make, "-n", "-s", "image", "IMAGE=registry.example.com/ml/epochfs"], cwd=ROOT,
                           capture_output=True, text=True, check=True)
    assert f"-t registry.example.com/ml/epochfs:{chart['appVersion']} ." in other.stdout
