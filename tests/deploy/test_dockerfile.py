"""The sidecar image's Dockerfile and its pins, checked without a Docker engine.

checkov's Dockerfile checks must pass (against the dockerfile section of the skip list), and
every command the Dockerfile runs must exist: the console script and its sub-command, the extras
it installs (sidecar, and the extra of every backend of the sidecar's registry: gcs for gs://,
azure for az:// remotes), the tools its RUN lines call, the files it copies
(and that .dockerignore lets through). The shape that keeps the image small and reproducible is
asserted: no `# syntax=` line (offline builds), the base as a build ARG defaulting to a pinned
python:slim, one venv built in the build stage from docker/constraints.txt and copied whole. The
constraints must pin every requirement exactly and resolve to themselves on Python 3.11 and 3.13.
The build stage's wheel is replayed from exactly the files the build context would hold. The image
itself is built and run by tests/deploy/test_container_pod.py (`make test-container`).
"""

from __future__ import annotations

import fnmatch
import json
import os
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
from helm_helpers import run_checkov, unexplained
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from epochfs.fuse import libfuse
from epochfs.sidecar import cli, config
from epochfs.sidecar.remote import registry

ROOT = Path(__file__).resolve().parents[2]
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


TEXT = DOCKERFILE.read_text()
INSTRUCTIONS = parse(TEXT)
FINAL = max(i.stage for i in INSTRUCTIONS)
BUILD = 0
VENV = "/opt/epochfs"
CONSTRAINTS = "docker/constraints.txt"


def _runs(stage: int) -> str:
    return " ; ".join(i.args for i in INSTRUCTIONS if i.op == "RUN" and i.stage == stage)


def shell_commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line, split on &&, ||, ; and |, without the keywords of an
    if/then/fi around them or their redirections."""
    out = []
    for part in re.split(r"&&|\|\||;|\|", run):
        words = [w for w in shlex.split(part) if not re.fullmatch(r"\d*>>?\S*|\d*>&\d", w)]
        while words and words[0] in ("if", "then", "else", "fi"):
            words = words[1:]
        if words:
            out.append(words)
    return out


def exec_form(args: str) -> list[str]:
    value = yaml.safe_load(args)
    assert isinstance(value, list), f"not exec form: {args}"
    return [str(v) for v in value]


@pytest.mark.long
def test_checkov_dockerfile_checks_pass() -> None:
    failed = run_checkov(DOCKERFILE, "dockerfile")
    skips = yaml.safe_load((ROOT / "tests" / "checkov-skips.yaml").read_text())["dockerfile"]
    missing, stale = unexplained(failed, skips)
    assert not missing and not stale, (missing, stale)
    # One inline skip: checkov cannot see that `FROM ${BASE}` is pinned (the next test checks it).
    inline = re.findall(r"checkov:skip=(CKV_[A-Z0-9_]+):\s*\S", TEXT)
    assert inline == ["CKV_DOCKER_7"]


def test_no_syntax_directive() -> None:
    """`# syntax=` makes BuildKit pull a frontend image from a registry: offline builds fail."""
    assert not re.search(r"(?im)^#\s*syntax\s*=", TEXT)


def test_base_is_a_build_arg_defaulting_to_a_pinned_slim_python_of_the_project_version() -> None:
    args = [i for i in INSTRUCTIONS if i.op == "ARG" and i.stage == -1]
    assert [a.args.split("=", 1)[0] for a in args] == ["BASE"]
    default = args[0].args.split("=", 1)[1]
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-trixie", default)
    assert m, f"base image not pinned to a full version: {default}"
    assert (int(m[1]), int(m[2])) == (3, 11)
    floor = tuple(int(x) for x in PYPROJECT["project"]["requires-python"].lstrip(">=").split("."))
    assert (int(m[1]), int(m[2])) >= floor
    froms = [i.args.split() for i in INSTRUCTIONS if i.op == "FROM"]
    assert froms == [["${BASE}", "AS", "build"], ["${BASE}"]]  # a build and a final stage, one base


def test_entrypoint_is_the_console_script_and_its_sidecar_command() -> None:
    [entry] = [i for i in INSTRUCTIONS if i.op == "ENTRYPOINT"]
    assert exec_form(entry.args) == ["epochfs", "sidecar"]
    assert PYPROJECT["project"]["scripts"]["epochfs"] == "epochfs.sidecar.cli:main"
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert "sidecar" in sub.choices
    # `epochfs` and `python` (HEALTHCHECK) are the venv's: its bin folder leads PATH.
    [env] = [i for i in INSTRUCTIONS if i.op == "ENV" and "PATH=" in i.args]
    assert re.search(rf"\bPATH={VENV}/bin:\$PATH\b", env.args)


def test_healthcheck_asks_the_sidecars_health_port() -> None:
    [check] = [i for i in INSTRUCTIONS if i.op == "HEALTHCHECK"]
    cmd = exec_form(check.args.split(" CMD ", 1)[1])
    default_port = next(f.default for f in fields(config.SidecarSettings) if f.name == "health_port")
    assert "127.0.0.1:%s/healthz" in cmd[-1] and f"or {default_port})" in cmd[-1]
    compile(cmd[-1], "healthcheck", "exec")
    # The port the sidecar serves on when EPOCHFS_HEALTH_PORT moves it (the chart sets it): the
    # command itself run against a listener there.
    import http.server
    import threading

    seen: list[str] = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {"PATH": os.environ["PATH"], "EPOCHFS_HEALTH_PORT": str(server.server_address[1])}
        subprocess.run([sys.executable, "-c", cmd[-1]], env=env, check=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/healthz"]
    expose = [i.args for i in INSTRUCTIONS if i.op == "EXPOSE"]
    assert expose == [str(default_port)]


def test_default_user_is_the_unprivileged_epochfs_user() -> None:
    users = [i.args for i in INSTRUCTIONS if i.op == "USER"]
    assert users == ["10001:10001"] and [i.stage for i in INSTRUCTIONS if i.op == "USER"] == [FINAL]
    assert re.search(r"useradd --system --uid 10001 --user-group .* epochfs\b", _runs(FINAL))


def test_the_extra_of_every_registry_backend_is_installed() -> None:
    """Every scheme of the sidecar's registry is a remote the chart accepts
    (tests/deploy/test_chart_schemes_from_registry.py): the image carries each backend's extra
    (gcsfs for gs://, adlfs for az://), derived from the registry so that a new backend's extra
    cannot be left out of the Dockerfile."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    named = set()
    for i in INSTRUCTIONS:
        if i.op == "RUN":
            for cmd in shell_commands(i.args):
                for word in cmd:
                    m = re.fullmatch(r"(?:\.|epochfs)\[([a-z,]+)\]", word)
                    if m:
                        named |= set(m[1].split(","))
    assert named == {"sidecar"} | {b.extra for b in registry.BACKENDS} and named <= set(extras)
    assert named == {"sidecar", "gcs", "azure"}
    assert any(req.startswith("gcsfs") for req in extras["gcs"])
    assert any(req.startswith("adlfs") for req in extras["azure"])


def _pip_installs(stage: int) -> list[list[str]]:
    return [cmd for i in INSTRUCTIONS if i.op == "RUN" and i.stage == stage
            for cmd in shell_commands(i.args) if cmd[1:4] == ["-m", "pip", "install"]]


def test_the_venv_is_built_from_the_pins_and_copied_whole() -> None:
    """Build stage: a venv filled from docker/constraints.txt, epochfs installed offline against
    it, then setuptools and pip removed. Final stage: that venv in one COPY, and nothing
    else that installs Python packages (no wheels layer left behind)."""
    runs = _runs(BUILD)
    assert re.search(rf"python3 -m venv {VENV}\b", runs)
    pins, project = _pip_installs(BUILD)
    assert pins[0] == f"{VENV}/bin/python" and pins[-2:] == ["-r", CONSTRAINTS]
    assert project[0] == f"{VENV}/bin/python" and project[-1] == ".[sidecar,gcs,azure]"
    assert {"--no-index", "--no-build-isolation"} <= set(project)
    assert project[project.index("-c") + 1] == CONSTRAINTS
    [uninstall] = [c for c in shell_commands(runs) if c[1:4] == ["-m", "pip", "uninstall"]]
    assert uninstall[0] == f"{VENV}/bin/python" and {"pip", "setuptools"} <= set(uninstall[4:])
    assert runs.index("pip uninstall") > runs.index(".[sidecar,gcs,azure]")
    copies = [i.args for i in INSTRUCTIONS if i.op in ("COPY", "ADD") and i.stage == FINAL]
    assert copies == [f"--from=build {VENV} {VENV}"]
    assert _pip_installs(FINAL) == []
    copied = [i.args.split()[0] for i in INSTRUCTIONS if i.op == "COPY" and i.stage == BUILD]
    assert CONSTRAINTS in copied


def test_every_command_it_runs_exists() -> None:
    """RUN lines call tools present in a Debian python:slim image (checked on this Debian host),
    or the venv's python made by an earlier command."""
    for i in INSTRUCTIONS:
        if i.op != "RUN":
            continue
        for cmd in shell_commands(i.args):
            tool = cmd[0]
            if tool == f"{VENV}/bin/python":
                assert re.search(rf"python3 -m venv {VENV}\b", _runs(i.stage)), "venv used before made"
            else:
                assert shutil.which(tool) or tool == "echo", f"{tool} (from: {i.args[:60]}...)"
            if cmd[1:3] == ["-m", "pip"]:
                subprocess.run([sys.executable, "-m", "pip", cmd[3], "--help"], check=True,
                               capture_output=True)
    final_runs = _runs(FINAL)
    # No build tools in the final stage, and nothing left that installs code.
    assert not re.search(r"\b(gcc|g\+\+|make|build-essential|python3-dev|git|curl|wget)\b", final_runs)
    assert "python3 -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel" in final_runs
    assert "rm -rf /var/lib/apt/lists/*" in final_runs
    apt = re.search(r"apt-get install -y --no-install-recommends ([a-z0-9 .+-]+?)(?: &&|$)", final_runs)
    assert apt and apt[1].split() == ["fuse3"]


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian host")
def test_fuse3_package_brings_a_libfuse_the_sidecar_finds() -> None:
    """The package the image installs, fuse3, depends on a libfuse3-N package (libfuse3-3 on
    bookworm, libfuse3-4 on trixie); the library it holds is the one the FUSE server loads.
    (The image itself is checked by tests/deploy/test_container_pod.py.)"""
    depends = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", "fuse3"], capture_output=True, text=True)
    if depends.returncode != 0:
        pytest.skip("fuse3 is not installed on this host (make system-deps installs it)")
    [lib_pkg] = re.findall(r"\b(libfuse3-\d+)\b", depends.stdout)
    listed = subprocess.run(["dpkg-query", "-L", "fuse3", lib_pkg], capture_output=True, text=True,
                            check=True).stdout.split()
    assert any(p.endswith("/fusermount3") for p in listed)
    sonames = [p for p in listed if libfuse.SONAME.match(os.path.basename(p))]
    assert sonames, listed
    found = libfuse.find_libfuse3(environ={})
    assert os.path.realpath(found) in {os.path.realpath(p) for p in sonames}


def _pins() -> dict[str, str]:
    lines = [ln for ln in (ROOT / CONSTRAINTS).read_text().splitlines() if ln and not ln.startswith("#")]
    pairs = [ln.split("==") for ln in lines]
    assert all(len(p) == 2 and p[1] and not set(p[1]) & set("<>=!~*, ") for p in pairs), lines
    names = [p[0] for p in pairs]
    assert names == sorted(names) and len(set(names)) == len(names), names
    assert all(n == canonicalize_name(n) for n in names), names
    return dict((n, v) for n, v in pairs)


def _requirements() -> list[Requirement]:
    """What `pip install '.[sidecar,gcs,azure]'` asks for directly, and the build backend (setuptools
    alone: the image builds without isolation, and setuptools >= 70.1 makes wheels itself)."""
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    [backend] = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    return [Requirement(r) for r in (*project["dependencies"], *extras["sidecar"], *extras["gcs"],
                                     *extras["azure"], backend)]


def test_constraints_pin_every_requirement_exactly() -> None:
    """docker/constraints.txt: `name==version` lines only (PEP 503 names, sorted, once each); every
    direct requirement pinned to a version its specifier allows; how to regenerate it is written at
    its top, and that script exists."""
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not pinned"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    header = (ROOT / CONSTRAINTS).read_text().split("\n# ---\n")[0]
    assert "scripts/lock-image-deps.sh" in header
    script = ROOT / "scripts" / "lock-image-deps.sh"
    assert os.access(script, os.X_OK) and "freeze" in script.read_text()


def _resolve_under_pins(python: str, folder: Path) -> subprocess.Popen[str]:
    """pip's dry run of '.[sidecar,gcs,azure]''s requirements under the pins for CPython ``python`` on Linux
    x86-64, started (both versions resolve at once: each is mostly waiting on the index)."""
    platforms = [a for p in ("manylinux_2_28", "manylinux_2_17", "manylinux2014", "manylinux_2_5")
                 for a in ("--platform", f"{p}_x86_64")]
    reqs = [str(r) for r in _requirements() if r.name != "setuptools"]
    folder.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
         "--ignore-installed", "--only-binary=:all:", "--python-version", python, *platforms,
         "--target", str(folder / "target"), "--report", str(folder / "report.json"),
         "-c", str(ROOT / CONSTRAINTS), *reqs], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.long
def test_constraints_resolve_to_themselves_on_python_3_11_and_3_13(tmp_path: Path) -> None:
    """pip, asked for '.[sidecar,gcs,azure]''s requirements under the pins (the default base has 3.11,
    Debian trixie's python3 is 3.13), installs exactly pinned versions and needs nothing the pins
    lack. Needs the package index (metadata only)."""
    pins = _pins()
    runs = {python: _resolve_under_pins(python, tmp_path / python) for python in ("3.11", "3.13")}
    for python, proc in runs.items():
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, (python, stderr[-3000:])
        report = json.loads((tmp_path / python / "report.json").read_text())
        resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                    for i in report["install"]}
        assert resolved and all(pins.get(n) == v for n, v in resolved.items()), \
            (python, {n: (v, pins.get(n)) for n, v in resolved.items() if pins.get(n) != v})
        runtime = {n for n in pins if n != "setuptools"}
        if python == "3.11":  # the pins are a freeze on 3.11: nothing in them is unused there
            assert set(resolved) == runtime, runtime ^ set(resolved)


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
        if included and ((ROOT / name).is_file() or (ROOT / name).is_symlink()):
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


def _build_stage_copies(context: list[Path]) -> list[Path]:
    """The context files the build stage's COPY lines bring into /src (what `pip install .` sees)."""
    sources = [src.rstrip("/") for i in INSTRUCTIONS if i.op == "COPY" and i.stage == BUILD
               and not i.args.startswith("--from") for src in i.args.split()[:-1]]
    return [p for p in context if any(str(p) == s or str(p).startswith(s + "/") for s in sources)]


def test_the_license_files_are_in_the_context_and_copied_by_the_build_stage() -> None:
    """pyproject's license-files go into the wheel's dist-info/licenses/ only if the build sees
    them: a pattern that matches nothing is a setuptools warning today and an error from 2027."""
    license_files = PYPROJECT["project"]["license-files"]
    assert license_files == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    copied = {str(p) for p in _build_stage_copies(_context_files())}
    assert set(license_files) <= copied, set(license_files) - copied


def test_build_stage_replayed_builds_the_wheel(tmp_path: Path) -> None:
    """`pip wheel .` over exactly the files the build stage copies from the context gives the
    package, its script, its extra and its license."""
    ctx = tmp_path / "ctx"
    for rel in _build_stage_copies(_context_files()):
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, ctx / rel, follow_symlinks=False)  # src/epochfs/* are symlinks
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(ctx)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("epochfs-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "epochfs/sidecar/cli.py" in names and "epochfs/sidecar/kube/__init__.py" in names
    assert "epochfs/fuse/server.py" in names
    assert "epochfs = epochfs.sidecar.cli:main" in entry_points
    assert "Provides-Extra: sidecar" in meta and "Provides-Extra: gcs" in meta
    assert "Provides-Extra: azure" in meta
    assert re.search(r'Requires-Dist: kubernetes.*extra == "sidecar"', meta)
    assert "License-File: LICENSE" in meta
    [licensed] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    with zipfile.ZipFile(wheel) as z:
        assert z.read(licensed) == (ROOT / "LICENSE").read_bytes()
