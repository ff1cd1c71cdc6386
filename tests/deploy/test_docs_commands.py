"""Everything the docs tell a user to type is run by a test (issue 21, "Install").

Every command line of the README's and docs/'s command blocks (tests/docs_blocks.py reads them) is
in exactly one class: that of the one rule of :data:`RULES` its command (after ``VAR=value`` and
``sudo``) matches; a line that matches none, or more than one, fails with its page and line:

- ``Run``: run here, for real, in a sandbox this module makes: a moto S3 server holding the bucket
  ``bucket`` (``s3://bucket/train``: a few .npy samples), a cache the real ``epochfs sample`` filled
  from it with epoch 0 cut, and the real ``epochfs mount`` of that cache (root and FUSE). The docs'
  placeholders become the sandbox's by :data:`PLACEHOLDERS`, an explicit table; a line that still
  holds ``...`` or ``…`` after it has no runnable meaning and fails. A line that exits with a code
  other than its rule's fails, showing its stderr.
  A complete ``epochfs sidecar`` line runs until its ``/readyz`` says ready, against objects this
  module puts into that bucket for it, with a cache, a mount and a health port of its own
  (tests/docs_sidecar.py); a fragment of one (``epochfs sidecar ... --include '*.npy'``) has its
  flags and ``EPOCHFS_*`` variables checked against ``epochfs sidecar --help`` instead.
- ``Covered``: run elsewhere; the rule names the tests, scripts or make targets, which must exist.
- ``NotHere``: cannot run in a test, with the reason (a cluster, a registry, the internet).

So a new command in the docs must be classified here (``RULES``) before the tests pass. The flags
of ``epochfs`` lines are checked against the CLI by tests/deploy/test_docs.py, for every class.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from common import free_port, port_open, signal_state, stop_process, wait_until
from docs_blocks import PAGES, ROOT, DocCommand, all_commands, commands_of, words
from docs_sidecar import (
    env_problems,
    get_json,
    many_arrays,
    min_samples_of,
    run_until_ready,
    seed,
    small_objects,
)

from epochfs.sidecar.cli_bench import DEFAULT_BENCHMARKS

SAMPLES = 12
"""The sandbox dataset's .npy samples under s3://bucket/train."""
BIN = Path(sys.executable).parent
"""The venv's bin folder (its ``epochfs`` and ``python``), first on the lines' PATH."""
FUSE = os.geteuid() == 0 and os.path.exists("/dev/fuse")


@dataclass(frozen=True)
class Run:
    """Run here. ``how``: ``exits`` (run to its end), ``until-cached`` (a sampler: stopped with
    SIGTERM once it cached every sample, into a cache of its own), ``until-output`` (``--watch``:
    stopped with SIGINT, Ctrl-C, after its first frame), ``help`` (a benchmark: ``--help`` of the
    same program, which must know every flag the line shows; the benchmark itself runs for
    minutes, its code is tested by tests/sidecar/test_bench_*.py; ``epochfs bench NAMES --args
    ARGS`` stands for ``python -m epochfs.benchmarks.NAME ARGS`` of each name, as the CLI runs it),
    ``until-ready`` (a complete ``epochfs sidecar`` line, with a cache, a mount and a health port
    of its own: run until ``/readyz`` answers 200, which needs its ``--min-samples`` cached; then
    epoch 0 must show at least that many samples with the bucket's bytes, and SIGTERM must end it
    with ``codes`` and nothing mounted: tests/docs_sidecar.py), ``flags`` (a fragment, ``epochfs
    sidecar ... --include '*.npy'``: every flag it shows must be one ``epochfs sidecar --help``
    lists, every ``EPOCHFS_*`` it sets one the command reads)."""

    how: str
    codes: tuple[int, ...] = (0,)
    slow: bool = False


@dataclass(frozen=True)
class Covered:
    """Run elsewhere: each of ``by`` is a file of the repository or ``make <target>``."""

    by: tuple[str, ...]


@dataclass(frozen=True)
class NotHere:
    """Not run by any test, for ``reason``."""

    reason: str


Class = Run | Covered | NotHere
PY = r"(?:\S*/)?python3?"
CLUSTER = "needs a Kubernetes cluster (tests/deploy/test_helm_*.py render and validate the chart's objects)"
RULES: list[tuple[str, Class]] = [
    (r"epochfs (?:status|cut|verify|index|relist|unmount)\b(?!.*--watch)", Run("exits")),
    (r"epochfs status\b.*--watch", Run("until-output", codes=(130,))),
    (r"epochfs (?:--version|--help|[a-z-]+ --help)$", Run("exits")),
    (r"epochfs sample\b(?!.*--endpoint-url http://127\.0\.0\.1:9000)", Run("until-cached")),
    (r"epochfs sample\b.*--endpoint-url http://127\.0\.0\.1:9000",
     NotHere("samples the million-key synthetic_s3 server of the line above, minutes of listing "
             "(tests/remote/test_synthetic_s3.py tests that server, the other sample lines run here)")),
    (r"epochfs bench\b", Run("help")),
    (PY + r" -m epochfs\.benchmarks\.\w+", Run("help")),
    (PY + r" benchmarks/\w+\.py\b", Run("help")),
    (PY + r" examples/(?:raw_arrays|npz_samples|ddp_sampler)\.py$", Run("exits", slow=True)),
    # A complete line runs until ready (those with --include ask for the layouts' --min-samples,
    # 64-1,000 samples: ~15 s each, so slow); a fragment ("...", "[every flag ...]"): its flags
    (r"epochfs sidecar\b(?!.*(?:\.\.\.|…|\[))(?!.*--include)", Run("until-ready")),
    (r"epochfs sidecar\b(?!.*(?:\.\.\.|…|\[)).*--include", Run("until-ready", slow=True)),
    (r"epochfs sidecar\b.*(?:\.\.\.|…|\[)", Run("flags")),
    (PY + r" examples/lightning_datamodule\.py$", Covered(("tests/torchclient/test_lightning_example.py",))),
    (r"epochfs mount\b", Covered(("tests/fuse_helpers.py", "tests/mount/test_fuse_mount.py",
                                   "tests/mount/test_fuse_view.py"))),
    (r"make demo$", Covered(("tests/sidecar/test_demo.py",))),
    (r"make test$", Covered(("make test",))),  # the suite itself (CI: .ci/run)
    (r"make test-container\b", Covered(("make test-container", "tests/deploy/test_container_pod.py"))),
    # The README's install block, run from README.md by scripts/check-wheel.sh (its substitutions there)
    (r"apt-get install fuse3 python3-venv$|python3 -m venv /opt/epochfs |pip install '\.\[sidecar,torch\]'$",
     Covered(("scripts/check-wheel.sh", "make check-dist"))),
    # The dev venv the tests run in: make venv installs '.[dev]', which holds the bench extra
    (r"pip install '\.\[bench\]'$", Covered(("make venv",))),
    (r"dockerd ", Covered(("tests/container_engine.py", "make test-container"))),
    (r"helm (?:dependency update|template \S+) \S*examples/kubernetes\b",
     Covered(("tests/deploy/test_helm_attach.py",))),
    (r"kubectl kustomize ", Covered(("tests/deploy/test_plain_manifests.py",))),
    (r"kubectl (?!kustomize )", NotHere(CLUSTER)),
    (r"helm (?:install|upgrade|test|uninstall) ", NotHere(CLUSTER)),
    (r"make bench$", NotHere("runs the benchmarks for minutes, as root, after installing system packages "
                             "(each epochfs bench line of the docs runs here by --help)")),
    (r"make image\b", NotHere("needs a Docker engine (make test-container builds the same Dockerfile)")),
    (r"docker push ", NotHere("needs a registry to push to")),
    (r"pip install torch --index-url https://download\.pytorch\.org/",
     NotHere("needs the internet; scripts/check-wheel.sh installs the pinned CPU torch==2.13.0 instead")),
    (r"git (?:worktree add|archive) ",
     NotHere("reproduces a past measurement from an old commit (its benchmark runs here by --help)")),
]

PLACEHOLDERS: list[tuple[str, str]] = [
    (r"/var/cache/epochfs", "{cache}"),           # the docs' cache folder: the sandbox's cache
    (r"/mnt/epochfs", "{mount}"),                 # the docs' mount point: the sandbox's mount of it
    (r"\$EPOCHFS_MOUNT\b", "{mount}"),            # the sidecar container's view (the chart sets it)
    (r"\$EPOCHFS_CACHE\b", "{cache}"),            # the sidecar container's cache (the chart sets it)
    (r"https://s3\.example\.com", "{endpoint}"),  # the docs' S3-compatible endpoint: the moto server
    (r"(?<==)…", "testing"),                      # AWS_ACCESS_KEY_ID=…: moto's credentials
    (r"--cache …", "--cache {cache}"),            # "the cache of the line above"
    (r"\[--watch\]", "--watch"),                  # an optional part: run with it, as its rule expects
    (r"(?<![\w/.])\.venv/bin/python\b", "{python}"),  # the dev venv's python: the one running the tests
    (r"--health-port 8080\b", "--health-port {port}"),  # a free port: 8080 may be taken here
    (r"/epochfs-ro/objects\b", "{cache}/objects"),    # the folder view's link root: the cache's objects
]
"""The docs' placeholders and the sandbox's values, in order. ``s3://bucket/...`` stays: the moto
server has a bucket named ``bucket`` and ``EPOCHFS_ENDPOINT_URL`` points lines without
``--endpoint-url`` at it."""


def classes_of(command: DocCommand) -> list[Class]:
    """Every class whose rule matches the command (exactly one is right)."""
    return [cls for pattern, cls in RULES if re.match(pattern, command.command)]


def misclassified(commands: list[DocCommand]) -> list[str]:
    """``page:line: command`` of each command in no class or in more than one."""
    wrong = []
    for c in commands:
        found = classes_of(c)
        if len(found) != 1:
            what = "in no class: classify it in RULES" if not found else f"in {len(found)} classes {found}"
            wrong.append(f"{c.where}: {c.text!r} is {what}")
    return wrong


COMMANDS = all_commands()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_line_is_in_exactly_one_class(page: Path) -> None:
    wrong = misclassified(commands_of(page.read_text(), str(page.relative_to(ROOT))))
    assert not wrong, "\n".join(wrong)


def test_an_unclassified_command_is_found_with_its_page_and_line() -> None:
    """The check above can fail: a made-up page with a new command in each kind of block."""
    page = "\n".join([
        "# A page",                                   # 1
        "```sh",                                      # 2
        "epochfs status --cache /var/cache/epochfs    # known",
        "epochfs frobnicate --cache /x \\",           # 4: joined with the next line
        "    --all",
        "# a comment line, not a command",
        "```",
        "```console",                                 # 8
        "$ s5cmd ls s3://bucket/   # a prompt",       # 9
        "s3://bucket/a   (output, not a command)",
        "```",
        "```",                                        # 12: untagged, starts with a program
        "AWS_PROFILE=x rclone copy a b",              # 13
        "```",
        "```",                                        # an untagged block of output: not commands
        "dataset  tool  seconds",
        "```",
        "```python",
        "import os",
        "```",
    ]) + "\n"
    commands = commands_of(page, "made-up.md")
    assert [(c.line, c.text) for c in commands] == [
        (3, "epochfs status --cache /var/cache/epochfs"),
        (4, "epochfs frobnicate --cache /x --all"),
        (9, "s5cmd ls s3://bucket/"),
        (13, "AWS_PROFILE=x rclone copy a b"),
    ]
    assert misclassified(commands) == [
        "made-up.md:4: 'epochfs frobnicate --cache /x --all' is in no class: classify it in RULES",
        "made-up.md:9: 's5cmd ls s3://bucket/' is in no class: classify it in RULES",
        "made-up.md:13: 'AWS_PROFILE=x rclone copy a b' is in no class: classify it in RULES",
    ]


def test_an_indented_command_is_found_and_indented_output_is_not() -> None:
    """Indented code blocks are read (docs/performance.md shows its benchmark runs in them), line by
    line: a command is a line that names a program or has a prompt; output, trees and requests are
    not, and neither is a list item's text indented 4."""
    page = "\n".join([
        "Run it:",                                                     # 1
        "",
        "    pip install '.[bench]'            # from a clone",         # 3
        "    nice -n 10 .venv/bin/python -m epochfs.benchmarks.nope \\",  # 4: joined with the next line
        "        --repeat 3",
        "    epoch 0:   104 samples (104 new)   output, not a command",
        "",
        "It prints:",
        "",
        "    epoch 0:   104 samples (104 new, 0 left out)  cache   1.6/6.0 MiB",  # 10: output only
        "    /mnt/epochfs/",
        "      latest -> epoch-N",
        "    POST http://127.0.0.1:8080/v1/client-report",
        "    {\"samples\": 256}",
        "",
        "- a list item",                                               # 16
        "",
        "    epochfs frobnicate --text   (a list item's text, not code)",
        "",
        "      $ s5cmd ls s3://bucket/   (code in the list item: 2 + 4 spaces)",  # 20
        "      s3://bucket/a",
        "",
        "```sh",                                                       # 23: fenced, read as before
        "epochfs cut --cache /x \\",
        "    --all",
        "```",
    ]) + "\n"
    commands = commands_of(page, "made-up.md")
    assert [(c.line, c.text) for c in commands] == [
        (3, "pip install '.[bench]'"),
        (4, "nice -n 10 .venv/bin/python -m epochfs.benchmarks.nope --repeat 3"),
        (20, "s5cmd ls s3://bucket/   (code in the list item: 2 + 4 spaces)"),
        (24, "epochfs cut --cache /x --all"),
    ]
    assert commands[1].command == ".venv/bin/python -m epochfs.benchmarks.nope --repeat 3"
    assert misclassified(commands[1:3]) == [
        "made-up.md:20: 's5cmd ls s3://bucket/   (code in the list item: 2 + 4 spaces)' is in no class: "
        "classify it in RULES",
    ]


def test_the_docs_have_command_lines_of_each_class() -> None:
    """The extraction finds the docs' commands (a change of its patterns that found none would pass
    the checks above vacuously)."""
    kinds = {type(found[0]) for c in COMMANDS if len(found := classes_of(c)) == 1}
    assert kinds == {Run, Covered, NotHere}
    assert any(c.page == "README.md" and c.command.startswith("pip install '.[") for c in COMMANDS)


def test_what_covers_a_command_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    missing = [by for _, cls in RULES if isinstance(cls, Covered) for by in cls.by
               if not (re.search(rf"^{re.escape(by[5:])}:", makefile, re.M) if by.startswith("make ")
                       else (ROOT / by).is_file())]
    assert not missing, missing


# --- the sandbox and the RUN lines -------------------------------------------------------------


@dataclass
class Sandbox:
    endpoint: str
    cache: Path
    mount: Path | None
    root: Path
    env: dict[str, str]


def npy(value: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full((4, 4), value, np.float32))
    return out.getvalue()


@contextlib.contextmanager
def moto_server(folder: Path) -> Iterator[str]:
    """A moto S3 server of this module's own: the session's is emptied by other modules' tests."""
    port = free_port()
    with open(folder / "moto.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: port_open(port) or proc.poll() is not None, what="moto server")
        assert proc.poll() is None, (folder / "moto.log").read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def cached_samples(cache: Path) -> int:
    """How many samples the cache holds, as ``epochfs status`` reads it (0 before it exists)."""
    from epochfs.sidecar.status import read_stats

    try:
        return int(read_stats(cache=cache, mount=None)["samples"])
    except Exception:  # not made yet, or being made: not there yet
        return 0


def sample_until_cached(argv: list[str], cache: Path, env: dict[str, str], log: Path,
                        *, before_stop: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a sampler (``bash -c`` of one line) until it cached every sample, run ``before_stop``,
    then SIGTERM it; its exit code and log."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is not None or cached_samples(cache) >= SAMPLES, timeout=90,
                   what=f"{SAMPLES} samples cached")
        assert proc.poll() is None, f"the sampler exited with {proc.returncode}:\n{log.read_text()}"
        if before_stop:
            cut = subprocess.run(before_stop, env=env, capture_output=True, text=True, timeout=60)
            assert (cut.returncode, cut.stdout.strip()) == (0, "0"), cut.stderr
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, log.read_text(), "")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The moto bucket, a cache the real ``epochfs sample`` filled with epoch 0 cut, its mount."""
    root = tmp_path_factory.mktemp("docs-sandbox")
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server(root))
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "EPOCHFS_ENDPOINT_URL": endpoint, "EPOCHFS_REPORT_URL": "off", "TMPDIR": str(root)}
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
        s3.create_bucket(Bucket="bucket")
        for i in range(SAMPLES):
            s3.put_object(Bucket="bucket", Key=f"train/part{i % 2}/s{i:03d}.npy", Body=npy(i))
        cache = root / "cache"
        done = sample_until_cached(
            [str(BIN / "epochfs"), "sample", "--remote", "s3://bucket/train", "--endpoint-url", endpoint,
             "--cache", str(cache), "--capacity", "16Mi"],
            cache, env, root / "sample.log", before_stop=[str(BIN / "epochfs"), "cut", "--cache", str(cache)])
        assert done.returncode == 0, done.stdout
        mount = None
        if FUSE:
            from fuse_helpers import mounted

            mount = stack.enter_context(mounted(cache, root / "mnt")).path
        yield Sandbox(endpoint, cache, mount, root, env)


@pytest.fixture(scope="module")
def sidecar_objects(sandbox: Sandbox) -> dict[str, bytes]:
    """The objects the docs' complete sidecar lines read, put into the sandbox's moto server
    (the 1,000 arrays join them by :func:`sidecar_arrays`)."""
    return seed(sandbox.endpoint, small_objects())


@pytest.fixture(scope="module")
def sidecar_arrays(sidecar_objects: dict[str, bytes], sandbox: Sandbox) -> dict[str, bytes]:
    """:func:`sidecar_objects` and the 1,000 arrays of the lines with ``--min-samples 1000``."""
    sidecar_objects.update(seed(sandbox.endpoint, many_arrays()))
    return sidecar_objects


def in_sandbox(text: str, box: Sandbox, *, cache: Path | None = None, mount: Path | None = None,
               port: int | None = None) -> str:
    """The line with the docs' placeholders replaced by the sandbox's (:data:`PLACEHOLDERS`).

    A path the table does not map would be the machine's own (as root, a sampler made a real
    /var/cache/epochfs when a mapping was missing): every absolute path left must be the
    sandbox's, the checkout's or the venv's. ``cache``, ``mount``, ``port``: a line's own (a
    sampler's cache, a sidecar's), else the sandbox's and a free port."""
    mount = mount or box.mount
    if ("/mnt/epochfs" in text or "$EPOCHFS_MOUNT" in text) and mount is None:
        pytest.skip("the line reads a mount: needs root and FUSE")
    cache = cache or box.cache
    values = {"cache": str(cache), "mount": str(mount), "endpoint": box.endpoint,
              "python": sys.executable, "port": str(port or free_port())}
    for pattern, value in PLACEHOLDERS:
        text = re.sub(pattern, value.format(**values), text)
    assert "..." not in text and "…" not in text, f"a placeholder with no sandbox value: {text}"
    allowed = [str(p) for p in (box.root, cache.parent, ROOT, BIN.parent)]
    outside = [part for word in words(text) for part in word.split("=")
               if part.startswith("/") and not any(os.path.commonpath([part, a]) == a for a in allowed)]
    assert not outside, f"paths outside the sandbox (add them to PLACEHOLDERS): {outside} in {text}"
    return text


def as_from_a_terminal() -> None:
    """A line run as a user's shell runs it (in the child, before exec): every signal unblocked and
    Ctrl-C at its default. A blocked or ignored signal is inherited through exec, and a pytest
    worker's main thread is not a terminal's shell: a line that would stop at Ctrl-C for a user
    must not hang here for what the worker left behind."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_path_the_table_does_not_map_is_refused_before_it_runs(tmp_path: Path) -> None:
    """The guard of :func:`in_sandbox` can fail (a line is never run against the machine's paths)."""
    box = Sandbox("http://127.0.0.1:1", tmp_path / "cache", tmp_path / "mnt", tmp_path, {})
    mapped = in_sandbox("epochfs cut --cache /var/cache/epochfs", box)
    assert mapped == f"epochfs cut --cache {tmp_path}/cache"
    with pytest.raises(AssertionError, match="outside the sandbox"):
        in_sandbox("epochfs cut --cache /srv/epochfs", box)
    with pytest.raises(AssertionError, match="outside the sandbox"):
        in_sandbox("epochfs index s3://bucket/train --out=/etc/train.index", box)
    with pytest.raises(AssertionError, match="no sandbox value"):
        in_sandbox("epochfs sidecar ... --include '*.npy'", box)


def help_lines(command: str) -> list[str]:
    """The benchmark lines a line stands for: itself, or for ``epochfs bench [NAMES] [--args ARGS]``
    one ``python -m epochfs.benchmarks.NAME ARGS`` per name (the CLI's defaults without names), the
    processes ``epochfs bench`` starts."""
    argv = words(command)
    if argv[:2] != ["epochfs", "bench"]:
        return [command]
    own, args = argv[2:], []
    if "--args" in own:
        own, args = own[:own.index("--args")], own[own.index("--args") + 1:]
    names = [w for w in own if not w.startswith("-")] or list(DEFAULT_BENCHMARKS)
    return [shlex.join(["python", "-m", f"epochfs.benchmarks.{name}", *args]) for name in names]


def help_argv(command: str) -> tuple[list[str], list[str]]:
    """``program --help`` for a line that runs a benchmark or ``epochfs SUBCOMMAND``, and the flags
    the line shows (also an optional one, ``[--link-root DIR]``)."""
    argv = words(re.sub(r"^" + PY, "python", command))
    if argv[0] == "epochfs":
        program = [str(BIN / "epochfs"), argv[1]]
    else:
        program = [sys.executable, *argv[1:3]] if argv[1] == "-m" else [sys.executable, argv[1]]
    flags = [w.split("=", 1)[0] for w in (w.strip("[]") for w in argv[len(program):])
             if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
    return [*program, "--help"], flags


def help_flags(help_text: str) -> set[str]:
    """The flags a ``--help`` lists (whole words: ``--in`` is not ``--include``'s)."""
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text))


HELPS: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}
"""Each benchmark's ``--help``, run once: ~60 lines of the docs name ~15 programs."""


def help_problems(command: str, env: dict[str, str], codes: tuple[int, ...] = (0,)) -> list[str]:
    """What is wrong with a benchmark's line: its ``--help`` fails, or lacks a flag the line shows."""
    problems = []
    for line in help_lines(command):
        argv, flags = help_argv(line)
        key = tuple(argv)
        if key not in HELPS:
            HELPS[key] = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        done = HELPS[key]
        if done.returncode not in codes:
            problems.append(f"{argv} exited {done.returncode}:\n{done.stderr}")
            continue
        problems += [f"{argv[1:-1]} has no {flag}" for flag in flags if flag not in help_flags(done.stdout)]
    return problems


def flags_problems(command: DocCommand, env: dict[str, str]) -> list[str]:
    """What is wrong with a fragment's flags and ``EPOCHFS_*`` variables (class ``flags``)."""
    problems = help_problems(command.command, env)
    [line] = help_lines(command.command)
    return problems + env_problems(command.text, HELPS[tuple(help_argv(line)[0])].stdout)


def test_a_benchmark_line_with_a_flag_its_help_lacks_is_found() -> None:
    """The ``help`` check can fail: a made-up flag, and a module that is not there."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    line = 'python -m epochfs.benchmarks.fetch --repeat 3 --nope 1 --sample-args "--list-process 0"'
    assert help_argv(line)[1] == ["--repeat", "--nope", "--sample-args"]
    assert help_problems(line, env) == [f"{['-m', 'epochfs.benchmarks.fetch']} has no --nope"]
    [gone] = help_problems("python -m epochfs.benchmarks.nope --repeat 3", env)
    assert "exited 1" in gone and "No module named epochfs.benchmarks.nope" in gone
    assert help_lines("epochfs bench fetch loader --args --repeat 1") == [
        "python -m epochfs.benchmarks.fetch --repeat 1", "python -m epochfs.benchmarks.loader --repeat 1"]
    assert help_lines("epochfs bench") == [f"python -m epochfs.benchmarks.{n}" for n in DEFAULT_BENCHMARKS]
    assert help_problems("epochfs bench served_opens --args --files 4000 --nope 1", env) == [
        f"{['-m', 'epochfs.benchmarks.served_opens']} has no --nope"]


def exited(command: DocCommand, line: str, code: int | None, output: str) -> str:
    """A RUN line's failure: the page and line, the line as run, its exit code and its stderr."""
    return f"{command.where}: {line}\nexited {code}:\n{output}"


def run_case(c: DocCommand) -> object:
    [cls] = classes_of(c)
    assert isinstance(cls, Run)
    marks = [pytest.mark.slow] if cls.slow else []
    return pytest.param(c, cls, id=c.where, marks=marks)


RUN_LINES = [run_case(c) for c in COMMANDS
             if len(found := classes_of(c)) == 1 and isinstance(found[0], Run)]


@pytest.mark.parametrize(("command", "cls"), RUN_LINES)
def test_a_run_line_runs(command: DocCommand, cls: Run, sandbox: Sandbox, tmp_path: Path,
                         request: pytest.FixtureRequest) -> None:
    if cls.how == "help":
        problems = help_problems(command.command, sandbox.env, cls.codes)
        assert not problems, f"{command.where}: {command.text}\n" + "\n".join(problems)
        return
    if cls.how == "flags":
        problems = flags_problems(command, sandbox.env)
        assert not problems, f"{command.where}: {command.text}\n" + "\n".join(problems)
        return
    if cls.how == "until-ready":  # a sidecar of its own cache, mount and port
        if "--view folder" not in command.text and not FUSE:
            pytest.skip("a FUSE view: needs root and /dev/fuse")
        port = free_port()
        (tmp_path / "mnt").mkdir()  # /mnt/epochfs: in a pod the shared volume, there before the sidecar
        line = in_sandbox(command.text, sandbox, cache=tmp_path / "cache", mount=tmp_path / "mnt", port=port)
        objects = request.getfixturevalue(  # seeded for these lines only, the arrays where needed
            "sidecar_arrays" if min_samples_of(line) > len(small_objects()) else "sidecar_objects")
        run_until_ready(line, sandbox.env, tmp_path / "line.log", port, objects)
        return
    if cls.how == "until-cached":  # a sampler of its own cache: the shared one stays as it is
        cache = tmp_path / "cache"
        line = in_sandbox(command.text, sandbox, cache=cache)
        done = sample_until_cached(["bash", "-c", line], cache, sandbox.env, tmp_path / "line.log")
        assert done.returncode in cls.codes, exited(command, line, done.returncode, done.stdout)
        assert "stopped cleanly" in done.stdout, done.stdout
        return
    line = in_sandbox(command.text, sandbox)
    if cls.how == "until-output":
        out = tmp_path / "out"
        with open(out, "wb") as f:  # faulthandler: a line that outlives its Ctrl-C shows where it is
            proc = subprocess.Popen(["bash", "-c", line], stdout=f, stderr=subprocess.PIPE,
                                    env={**sandbox.env, "PYTHONFAULTHANDLER": "1"}, cwd=ROOT,
                                    start_new_session=True, preexec_fn=as_from_a_terminal)
        try:
            wait_until(lambda: proc.poll() is not None or "samples" in out.read_text(), timeout=60,
                       what=f"the first frame of {line}")
            assert proc.poll() is None, exited(command, line, proc.returncode, "(before it was interrupted)")
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as "until interrupted" means
            try:
                _, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                signals = signal_state(proc.pid)  # blocked, ignored, pending: why Ctrl-C did nothing
                os.killpg(proc.pid, signal.SIGABRT)  # its threads' stacks on stderr
                _, stderr = proc.communicate(timeout=30)
                pytest.fail(f"{command.where}: {line} still ran 30 s after its Ctrl-C ({signals}); "
                            f"its stacks then:\n{stderr.decode(errors='replace')[-6000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode in cls.codes, exited(command, line, proc.returncode, stderr.decode())
        return
    done = subprocess.run(["bash", "-c", line], env=sandbox.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in cls.codes, exited(command, line, done.returncode, done.stderr)


def test_a_sidecar_fragment_with_a_misspelt_flag_or_variable_is_found() -> None:
    """The ``flags`` check can fail: a misspelt flag, an optional one in brackets, a variable the
    sidecar does not read (its flag is misspelt) and a prefix of a real flag."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    right = DocCommand("made-up.md", 1, "EPOCHFS_EXCLUDE='*.json' epochfs sidecar ... --include '*.npy' "
                                        "[--link-root DIR]")
    assert classes_of(right) == [Run("flags")]
    assert flags_problems(right, env) == []
    wrong = DocCommand("made-up.md", 2, "EPOCHFS_EXCLUD='*.json' epochfs sidecar ... --inclde '*.npy' "
                                        "[--lnk-root DIR] --in x")
    assert classes_of(wrong) == [Run("flags")]
    assert flags_problems(wrong, env) == [
        "['sidecar'] has no --inclde", "['sidecar'] has no --lnk-root", "['sidecar'] has no --in",
        "the command reads no EPOCHFS_EXCLUD"]


[README_SIDECAR, FOLDER_SIDECAR] = [
    next(c for c in COMMANDS if c.page == page and c.command.startswith("epochfs sidecar"))
    for page in ("README.md", "docs/folderview.md")]


@pytest.mark.parametrize(("change", "says"), [
    (("--capacity 200Gi", "--capcity 200Gi"), "unrecognized arguments: --capcity"),
    (("--capacity 200Gi", "--capacity 200Gx"), "--capacity: not a size: '200Gx'"),
])
def test_a_complete_sidecar_line_with_a_misspelt_flag_or_a_wrong_value_fails(
        change: tuple[str, str], says: str, sandbox: Sandbox, tmp_path: Path) -> None:
    """The ``until-ready`` run can fail: the README's line with a flag or a value changed."""
    command = DocCommand("README.md", README_SIDECAR.line, README_SIDECAR.text.replace(*change))
    assert command.text != README_SIDECAR.text
    assert classes_of(command) == [Run("until-ready")]
    (tmp_path / "mnt").mkdir()
    port = free_port()
    line = in_sandbox(command.text, sandbox, cache=tmp_path / "cache", mount=tmp_path / "mnt", port=port)
    with pytest.raises(AssertionError, match="exited 2 before it was ready") as failed:
        run_until_ready(line, sandbox.env, tmp_path / "line.log", port, {})
    assert says in str(failed.value)


def test_a_sidecar_line_whose_epoch_is_not_the_buckets_fails(sandbox: Sandbox, tmp_path: Path,
                                                             sidecar_objects: dict[str, bytes]) -> None:
    """The ``until-ready`` check of epoch 0 can fail: the folder view's line (no FUSE needed), told
    that the bucket holds other bytes than it does; the sidecar is stopped all the same."""
    (tmp_path / "mnt").mkdir()
    port = free_port()
    line = in_sandbox(FOLDER_SIDECAR.text, sandbox, cache=tmp_path / "cache", mount=tmp_path / "mnt",
                      port=port)
    other = {key: body + b"!" for key, body in sidecar_objects.items()}
    with pytest.raises(AssertionError, match=r"epoch-0/(\S+) is not the bytes of s3://bucket/dataset/\1"):
        run_until_ready(line, sandbox.env, tmp_path / "line.log", port, other)
    assert get_json(f"http://127.0.0.1:{port}/readyz") == (0, {})  # it is gone
