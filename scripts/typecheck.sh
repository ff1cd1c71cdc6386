#!/usr/bin/env bash
# mypy over the epochfs packages. The folders sidecar/, fuse/, torchclient/ are mapped to
# epochfs.* by setuptools package-dir; mypy does not read that mapping, so we give it a tree of
# symlinks with the import names.
set -euo pipefail
py=${1:-.venv/bin/python}
root=$(cd "$(dirname "$0")/.." && pwd)
tree="$root/build/typecheck"
rm -rf "$tree" && mkdir -p "$tree/epochfs"
for pkg in sidecar fuse torchclient; do ln -s "$root/$pkg" "$tree/epochfs/$pkg"; done
cd "$tree"
"$root/$py" -m mypy --config-file "$root/pyproject.toml" -p epochfs.sidecar -p epochfs.fuse -p epochfs.torchclient
