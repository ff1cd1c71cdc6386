#!/usr/bin/env bash
# Regenerate docker/constraints.txt: the exact versions the sidecar image installs.
# A clean Python 3.11 venv (the default base's interpreter) installs '.[sidecar,gcs,azure]' and the
# build backend (setuptools, which builds wheels itself since 70.1: the image builds epochfs
# without build isolation, from these pins) from the package index; its `pip freeze --all` (pip and epochfs left out) replaces the pins
# below the file's "# ---" line; the header above it is kept. Local pip config (find-links, extra indexes) is ignored
# so the pins are what the index serves to the image build. tests/deploy/test_dockerfile.py then checks
# that the pins resolve on Python 3.11 and 3.13.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3.11}
out="$root/docker/constraints.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
# A TLS-intercepting proxy's CA is in the system store, which pip does not read by default.
[ -z "${PIP_CERT:-}" ] && [ -r /etc/ssl/certs/ca-certificates.crt ] && export PIP_CERT=/etc/ssl/certs/ca-certificates.crt
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --upgrade setuptools
"$tmp/venv/bin/pip" install --quiet "$root[sidecar,gcs,azure]"
{
  sed -n '/^# ---$/q;p' "$out"
  echo '# ---'
  # PEP 503 names (PyYAML -> pyyaml, prometheus_client -> prometheus-client), sorted.
  "$tmp/venv/bin/pip" freeze --all --exclude pip --exclude epochfs \
    | awk -F'==' '{ n = tolower($1); gsub(/[-_.]+/, "-", n); print n "==" $2 }' | sort -t= -k1,1
} > "$tmp/constraints.txt"
mv "$tmp/constraints.txt" "$out"
echo "wrote $out ($(grep -c '==' "$out") pins)"
