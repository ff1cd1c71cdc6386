# syntax=docker/dockerfile:1
# The epochfs sidecar image: `epochfs sidecar` (sampler + read-only FUSE view + /healthz,
# /readyz, /metrics). Build from the repository root:  docker build -t epochfs:0.1.0 .
# docs/kubernetes.md says what needs root and why; the Helm chart runs this image as the
# privileged native sidecar of a training Job.

# Both stages use the same base, pinned by version: the interpreter the project targets.
# ---- build: wheels for epochfs and its sidecar extra only (no torch, no dev tools) ----------
FROM python:3.11.14-slim-trixie AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sidecar/ sidecar/
COPY fuse/ fuse/
COPY torchclient/ torchclient/
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels ".[sidecar]"

# ---- runtime: fuse3 and the wheels; nothing that builds or fetches code is left -------------
FROM python:3.11.14-slim-trixie
LABEL org.opencontainers.image.title="epochfs" \
      org.opencontainers.image.description="Samples a remote dataset into a node cache and serves growing epoch-N/ folders through a read-only FUSE mount" \
      org.opencontainers.image.licenses="Apache-2.0"
# fuse3: libfuse3 (mfusepy loads it) and fusermount3 (unmounts a dead mount, lets a non-root
# user mount). user_allow_other lets a non-root sidecar share its mount with the trainer's user.
RUN apt-get update \
    && apt-get install -y --no-install-recommends fuse3 \
    && rm -rf /var/lib/apt/lists/* \
    && echo user_allow_other >> /etc/fuse.conf \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin epochfs
COPY --from=build /wheels /tmp/wheels
RUN python -m pip install --no-cache-dir --no-index --find-links=/tmp/wheels "epochfs[sidecar]" \
    && rm -rf /tmp/wheels \
    && python -m pip uninstall --yes pip setuptools wheel
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (`epochfs sample`, `status`, `cut` need nothing more). The sidecar's FUSE
# mount in Kubernetes runs as root in a privileged container: the chart sets runAsUser 0.
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["epochfs", "sidecar"]
