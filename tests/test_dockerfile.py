"""The sidecar image's Dockerfile, checked without a Docker engine (none is available here).

checkov's Dockerfile checks must pass (against the dockerfile section of the skip list), and
every command the Dockerfile runs must exist: the console script and its sub-command, the extra
it installs, the tools its RUN lines call, the files it copies (and that .dockerignore lets
through). The build stage itself is replayed: the wheel is built from exactly the files the
build context would hold, and must carry the `epochfs` entry point and the `sidecar` extra.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import tomllib
import yaml
from epochfs.sidecar import cli, config
from helm_helpers import run_checkov, unexplained

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass
class Instruction:
    stage: int
    op: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (enough for this file)."""
    out: list[Instruction] = []
    stage = -1
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        buf += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if stripped.endswith("\\"):
            continue
        op, _, args = buf.strip().partition(" ")
        if op.upper() == "FROM":
            stage += 1
        out.append(Instruction(stage, op.upper(), args.strip()))
        buf = ""
    return out


INSTRUCTIONS = parse(DOCKERFILE.read_text())
FINAL = max(i.stage for i in INSTRUCTIONS)


def shell_commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line, split on &&, ||, ; and |."""
    parts = re.split(r"&&|\|\||;|\|", run)
    return [shlex.split(p) for p in parts if p.strip()]


def exec_form(args: str) -> list[str]:
    value = yaml.safe_load(args)
    assert isinstance(value, list), f"not exec form: {args}"
    return [str(v) for v in value]


def test_checkov_dockerfile_checks_pass() -> None:
    failed = run_checkov(DOCKERFILE, "dockerfile")
    skips = yaml.safe_load((ROOT / "tests" / "checkov-skips.yaml").read_text())["dockerfile"]
    missing, stale = unexplained(failed, skips)
    assert not missing and not stale, (missing, stale)


def test_base_images_are_pinned_slim_python_of_the_project_version() -> None:
    froms = [i.args.split()[0] for i in INSTRUCTIONS if i.op == "FROM"]
    assert len(set(froms)) == 1 and len(froms) == 2  # a build stage and a final stage, one base
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-[a-z]+", froms[0])
    assert m, f"base image not pinned to a full version: {froms[0]}"
    assert (int(m[1]), int(m[2])) == (3, 11)
    floor = tuple(int(x) for x in PYPROJECT["project"]["requires-python"].lstrip(">=").split("."))
    assert (int(m[1]), int(m[2])) >= floor


def test_entrypoint_is_the_console_script_and_its_sidecar_command() -> None:
    [entry] = [i for i in INSTRUCTIONS if i.op == "ENTRYPOINT"]
    assert exec_form(entry.args) == ["epochfs", "sidecar"]
    assert PYPROJECT["project"]["scripts"]["epochfs"] == "epochfs.sidecar.cli:main"
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert "sidecar" in sub.choices  # type: ignore[operator]


def test_healthcheck_asks_the_sidecars_health_port() -> None:
    [check] = [i for i in INSTRUCTIONS if i.op == "HEALTHCHECK"]
    cmd = exec_form(check.args.split(" CMD ", 1)[1])
    default_port = next(f.default for f in fields(config.SidecarSettings) if f.name == "health_port")
    assert f"127.0.0.1:{default_port}/healthz" in cmd[-1]
    compile(cmd[-1], "healthcheck", "exec")
    expose = [i.args for i in INSTRUCTIONS if i.op == "EXPOSE"]
    assert expose == [str(default_port)]


def test_only_the_sidecar_extra_is_installed() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    named = set()
    for i in INSTRUCTIONS:
        if i.op == "RUN":
            for cmd in shell_commands(i.args):
                for word in cmd:
                    m = re.fullmatch(r"(?:\.|epochfs)\[([a-z,]+)\]", word)
                    if m:
                        named |= set(m[1].split(","))
    assert named == {"sidecar"} and named <= extras


def test_every_command_it_runs_exists() -> None:
    """RUN lines call tools present in a Debian python:slim image (checked on this Debian host)."""
    for i in INSTRUCTIONS:
        if i.op != "RUN":
            continue
        for cmd in shell_commands(i.args):
            assert shutil.which(cmd[0]) or cmd[0] == "echo", f"{cmd[0]} (from: {i.args[:60]}...)"
            if cmd[:3] == ["python", "-m", "pip"]:
                subprocess.run([sys.executable, "-m", "pip", cmd[3], "--help"], check=True,
                               capture_output=True)
    final_runs = " ".join(i.args for i in INSTRUCTIONS if i.op == "RUN" and i.stage == FINAL)
    # No build tools in the final stage, and nothing left that installs code.
    assert not re.search(r"\b(gcc|g\+\+|make|build-essential|python3-dev|git|curl|wget)\b", final_runs)
    assert "pip uninstall --yes pip setuptools wheel" in final_runs
    assert "rm -rf /var/lib/apt/lists/*" in final_runs
    apt = re.search(r"apt-get install -y --no-install-recommends ([a-z0-9 .+-]+?)(?: &&|$)", final_runs)
    assert apt and apt[1].split() == ["fuse3"]


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian host")
def test_fuse3_package_provides_what_the_sidecar_loads() -> None:
    listed = subprocess.run(["dpkg-query", "-L", "fuse3", "libfuse3-3"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("fuse3 is not installed on this host (make system-deps installs it)")
    assert "/usr/bin/fusermount3" in listed.stdout or "/bin/fusermount3" in listed.stdout
    assert "libfuse3.so.3" in listed.stdout


def _context_files() -> list[Path]:
    """The files `docker build .` would send, by .dockerignore's rules (last match wins)."""
    rules = [r.strip() for r in (ROOT / ".dockerignore").read_text().splitlines()
             if r.strip() and not r.startswith("#")]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in tracked:
        included = True
        for rule in rules:
            negate = rule.startswith("!")
            pattern = rule.lstrip("!").rstrip("/")
            hit = (fnmatch.fnmatch(name, pattern) or name.startswith(pattern + "/")
                   or fnmatch.fnmatch(name, pattern.replace("**/", "*/")) or
                   (pattern.startswith("**/") and fnmatch.fnmatch(Path(name).name, pattern[3:])))
            if hit:
                included = negate
        if included and (ROOT / name).is_file():
            out.append(Path(name))
    return out


def test_copy_sources_are_in_the_build_context() -> None:
    context = _context_files()
    names = {str(p) for p in context}
    for i in INSTRUCTIONS:
        if i.op == "COPY" and not i.args.startswith("--from"):
            *sources, _dest = i.args.split()
            for src in sources:
                src = src.rstrip("/")
                assert src in names or any(n.startswith(src + "/") for n in names), src
    assert not any(n.startswith(("tests/", ".venv/", "helm/", ".git/")) for n in names)


def test_build_stage_replayed_builds_the_wheel(tmp_path: Path) -> None:
    """`pip wheel .` over exactly the build context gives the package, its script and its extra."""
    ctx = tmp_path / "ctx"
    for rel in _context_files():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, ctx / rel)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(ctx)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("epochfs-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "epochfs/sidecar/cli.py" in names and "epochfs/sidecar/kube.py" in names
    assert "epochfs/fuse/server.py" in names
    assert "epochfs = epochfs.sidecar.cli:main" in entry_points
    assert "Provides-Extra: sidecar" in meta
    assert re.search(r'Requires-Dist: kubernetes.*extra == "sidecar"', meta)
