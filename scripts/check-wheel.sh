#!/usr/bin/env bash
# The wheel `make dist` builds, installed and run as a user would run it (issue 21, "Install"): a
# fresh venv in a temporary folder, torch pinned to the CPU build first (the `torch` extra's loose
# `torch>=2.1` would otherwise pull a multi-GB CUDA build), then the wheel with the sidecar and torch
# extras, and from that venv only, away from the checkout (so nothing imports the source tree):
#   `epochfs --version`; `epochfs sample` of a small file:// dataset of .npy samples until every one
#   is cached, stopped with SIGTERM (exit 0); `epochfs cut` and `epochfs verify` of that cache; and the
#   torch client reading epoch 0 through `epochfs publish`'s folder view, every value checked.
# Then the README's install block (the ```sh block under "## Use it"), taken out of README.md and
# run line by line from the clone into a second fresh venv, as a user would type it, with these
# substitutions only: the venv's path /opt/epochfs becomes a temporary folder; the torch line
# (download.pytorch.org, not reachable everywhere) becomes `pip install torch==2.13.0`, the pinned
# CPU build; an `apt-get install` line is skipped when dpkg says its packages are installed (run
# with -y as root otherwise: nobody is there to answer its question); the `epochfs sidecar` line,
# which needs a real bucket, is parsed by the CLI's own parser instead of run. Then `epochfs
# --version` from that venv. A block that cannot be found (its shape changed) fails the check.
# No FUSE and no port: it runs anywhere the wheel should install. Any failure exits non-zero.
#
# Usage: scripts/check-wheel.sh [WHEEL]   (default: the one dist/epochfs-*.whl; `make check-dist`)
# PYTHON: the interpreter the venv is made from (default python3). KEEP=1 keeps the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."

shopt -s nullglob
wheels=("${1:-}")
[ -n "${1:-}" ] || wheels=(dist/epochfs-*-py3-none-any.whl)
if [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "check-wheel: want exactly one wheel (got: ${wheels[*]:-none}); run make dist first" >&2
    exit 2
fi
wheel=$(realpath "${wheels[0]}")
want_version=$(basename "$wheel" | cut -d- -f2)
SAMPLES=24
started=$SECONDS

tmp=$(mktemp -d /tmp/epochfs-check-wheel.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "${KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then
        echo "check-wheel: kept $tmp (logs: $tmp/*.log)" >&2
        local logs=("$tmp"/*.log)
        [ $rc -eq 0 ] || [ ${#logs[@]} -eq 0 ] || tail -n 20 "${logs[@]}" >&2 || true
    else
        rm -rf "$tmp"
    fi
    exit $rc
}
trap cleanup EXIT
fail() { echo "check-wheel: FAILED: $*" >&2; exit 1; }
say() { echo "check-wheel: $* ($((SECONDS - started)) s)"; }

say "installing $(basename "$wheel") into a fresh venv in $tmp"
"${PYTHON:-python3}" -m venv "$tmp/venv"
venv="$tmp/venv/bin"
pip=("$venv/python" -m pip install -q --disable-pip-version-check)
# pip's output goes to pip.log (shown when this fails): the machine's index warnings drown the rest.
"${pip[@]}" torch==2.13.0 >> "$tmp/pip.log" 2>&1 || fail "pip install torch==2.13.0"
"${pip[@]}" "$wheel[sidecar,torch]" >> "$tmp/pip.log" 2>&1 || fail "pip install $(basename "$wheel")[sidecar,torch]"
clone=$PWD
user_path=$PATH  # the README's block runs with the user's PATH, not this venv's
export PATH="$venv:$PATH" EPOCHFS_REPORT_URL=off
cd "$tmp"  # away from the checkout: `import epochfs` must find the installed wheel
"$venv/python" - <<'EOF' || fail "the installed environment"
import importlib.metadata as md, sys
import epochfs, torch
assert epochfs.__file__.startswith(sys.prefix), f"epochfs imported from {epochfs.__file__}, not the venv"
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__}: not the CPU build"
cuda = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].lower().startswith("nvidia"))
assert not cuda, f"CUDA packages installed: {cuda}"
print(f"check-wheel: epochfs from {epochfs.__file__}, torch {torch.__version__}")
EOF
say "installed"

[ "$(command -v epochfs)" = "$venv/epochfs" ] || fail "epochfs on PATH is $(command -v epochfs)"
version=$(epochfs --version) || fail "epochfs --version"
[ "$version" = "epochfs $want_version" ] || fail "epochfs --version said '$version', want 'epochfs $want_version'"
# The license as the metadata states it (PEP 639) and its text in the wheel.
"$venv/python" - <<'PY' || fail "the wheel's license metadata"
from importlib.metadata import distribution
d = distribution("epochfs")
assert d.metadata["License-Expression"] == "Apache-2.0", d.metadata["License-Expression"]
assert d.metadata.get_all("License-File") == ["LICENSE"], d.metadata.get_all("License-File")
text = next(f for f in d.files if f.name == "LICENSE").read_text()
assert "Apache License" in text and "Version 2.0" in text
PY
say "$version"

# A small dataset of .npy samples in two folders: sample i is a 4x4 float32 array of i.
"$venv/python" - "$tmp/data" "$SAMPLES" <<'EOF'
import pathlib, sys
import numpy as np
root, count = pathlib.Path(sys.argv[1]), int(sys.argv[2])
for i in range(count):
    path = root / f"part{i % 2}" / f"s{i:03d}.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.full((4, 4), i, np.float32))
EOF

# Bounded polls of the real processes' state (a CLI's status), never a fixed sleep.
until_true() {  # DESCRIPTION SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds
    local what=$1 deadline=$((SECONDS + $2)); shift 2
    until "$@"; do
        [ $SECONDS -lt $deadline ] || fail "$what: not within the time allowed"
        sleep 0.2
    done
}
cached_all() {
    kill -0 "$sampler" 2>/dev/null || fail "epochfs sample exited before caching $SAMPLES samples"
    epochfs status --cache "$tmp/cache" --json > "$tmp/status.json" 2>/dev/null || return 1
    "$venv/python" -c "import json, sys; sys.exit(json.load(open('$tmp/status.json'))['samples'] < $SAMPLES)"
}

epochfs sample --remote "file://$tmp/data" --cache "$tmp/cache" --capacity 16Mi > "$tmp/sample.log" 2>&1 &
sampler=$!
pids+=("$sampler")
until_true "epochfs sample caching $SAMPLES samples" 120 cached_all
epoch=$(epochfs cut --cache "$tmp/cache" 2>> "$tmp/cut.log") || fail "epochfs cut"
[ "$epoch" = 0 ] || fail "epochfs cut printed '$epoch', want 0"
kill -TERM "$sampler"
rc=0; wait "$sampler" || rc=$?
pids=()
[ $rc -eq 0 ] || fail "epochfs sample exited with $rc after SIGTERM"
grep -q "stopped cleanly" "$tmp/sample.log" || fail "epochfs sample did not say it stopped cleanly"
say "epochfs sample cached $SAMPLES samples and stopped cleanly; epoch 0 cut"
epochfs verify --cache "$tmp/cache" > "$tmp/verify.log" 2>&1 || fail "epochfs verify"

# The torch client of the same wheel reads epoch 0 through the folder view, every value checked.
epochfs publish --cache "$tmp/cache" --mount "$tmp/view" > "$tmp/publish.log" 2>&1 &
pids+=("$!")
"$venv/python" - "$tmp/view" "$SAMPLES" <<'EOF' || fail "the torch client over epoch 0"
import sys
import torch
from epochfs.torchclient import EpochLoader

root, count = sys.argv[1], int(sys.argv[2])
loader = EpochLoader(root, batch_size=8, decode="npy", num_workers=2, timeout=60)
values = sorted(int(v) for batch in loader.epoch(0) for v in batch[:, 0, 0])
loader.close()
assert values == list(range(count)), values
print(f"check-wheel: {loader.history[-1].line()}")
EOF
say "the torch client read epoch 0 of the wheel's cache"

# The README's install block, as a script: each line echoed, then run (or its substitute).
readme_venv="$tmp/readme-venv"
PYTHONPATH="$clone/tests" "${PYTHON:-python3}" - "$clone/README.md" "$readme_venv" > "$tmp/readme-block.sh" <<'EOF' \
    || fail "README.md's install block"
import re, shlex, sys
from pathlib import Path
from docs_blocks import commands_of  # the docs' own reader (tests/deploy/test_docs_commands.py)

readme, venv = Path(sys.argv[1]).read_text(), sys.argv[2]
section = readme.split("\n## Use it\n", 1)[1].split("\n## ", 1)[0] if "\n## Use it\n" in readme else ""
block = re.search(r"^```sh\n.*?^```", section, re.S | re.M)
lines = [c.text for c in commands_of(block.group(0), "README.md")] if block else []
if not any(x.startswith("python3 -m venv /opt/epochfs") for x in lines) \
        or not any(x.startswith("pip install '.[") for x in lines):
    sys.exit(f"no ```sh block under '## Use it' with `python3 -m venv /opt/epochfs` and "
             f"`pip install '.[...]'` (found {lines}): update scripts/check-wheel.sh with it")
for line in lines:
    print(f"echo {shlex.quote('+ ' + line)}")
    words = shlex.split(line)
    if words[0] == "sudo":
        words = words[1:]
    if words[:2] == ["apt-get", "install"]:
        packages = " ".join(shlex.quote(w) for w in words[2:] if not w.startswith("-"))
        print(f"if dpkg -s {packages} >/dev/null 2>&1; then echo 'skipped: installed already'; "
              f"elif [ \"$(id -u)\" = 0 ]; then {shlex.join(words)} -y; "
              f"else echo 'not installed and not root: {packages}' >&2; exit 1; fi")
    elif words[:3] == ["pip", "install", "torch"] and "download.pytorch.org" in line:
        print("pip install torch==2.13.0")
    elif words[:2] == ["epochfs", "sidecar"]:
        check = "import shlex, sys; from epochfs.sidecar.cli import build_parser; " \
                "build_parser().parse_args(shlex.split(sys.argv[1])[1:])"
        print(f"python -c {shlex.quote(check)} {shlex.quote(line)}")
    else:
        print(line.replace("/opt/epochfs", venv))
EOF
cat >> "$tmp/readme-block.sh" <<EOF
[ "\$(command -v epochfs)" = "$readme_venv/bin/epochfs" ] || { echo "epochfs is \$(command -v epochfs)" >&2; exit 1; }
epochfs --version > "$tmp/readme-version.txt"
EOF
say "running the README's install block (log: $tmp/readme.log)"
# Its own bash, with -e (a `( ... ) || fail` subshell would ignore -e), in the clone, on the user's PATH.
(cd "$clone" && PATH=$user_path bash -euo pipefail "$tmp/readme-block.sh") >> "$tmp/readme.log" 2>&1 \
    || fail "the README's install block (readme.log)"
version=$(cat "$tmp/readme-version.txt")
[ "$version" = "epochfs $want_version" ] || fail "the README's venv: epochfs --version said '$version'"
say "the README's install block installed $version from the clone"
say "passed"
