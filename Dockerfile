# The epochfs sidecar image: `epochfs sidecar` (sampler + read-only FUSE view + /healthz,
# /readyz, /metrics). Build from the repository root:  docker build -t epochfs:0.1.0 .
# docs/kubernetes.md says what needs root and why; the Helm chart runs this image as the
# privileged native sidecar of a training Job. No `# syntax=` line: the builder's own Dockerfile
# frontend is enough, and an offline build cannot pull another one.

# Both stages use the same base, pinned by version: a Debian (apt) image whose python3 has venv.
# Override it to build on another base, e.g. a locally made one where no registry is reachable
# (the container test does: docs/container-test.md):  docker build --build-arg BASE=my/base:tag .
# checkov:skip=CKV_DOCKER_7: checkov does not read ARG defaults; BASE defaults to a version-pinned
# image, which tests/deploy/test_dockerfile.py asserts.
ARG BASE=python:3.11.14-slim-trixie

# ---- build: the whole runtime environment in one venv, /opt/epochfs --------------------------
# First every package pinned in docker/constraints.txt (a layer that changes only with the pins);
# then epochfs with its sidecar, gcs (gs:// remotes) and azure (az:// remotes) extras, offline
# (--no-index): every remote scheme the chart accepts is served by the image; a dependency
# the pins miss fails the build instead of arriving at whatever version is newest. No build
# isolation: the build backend is the pinned setuptools (which makes wheels itself). setuptools
# and pip then leave the venv, which holds only what runs.
FROM ${BASE} AS build
WORKDIR /src
COPY docker/constraints.txt docker/constraints.txt
RUN python3 -m venv /opt/epochfs \
    && /opt/epochfs/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
       -r docker/constraints.txt
# LICENSE: pyproject's license-files, which setuptools puts in the wheel's dist-info/licenses/.
COPY pyproject.toml README.md LICENSE ./
COPY sidecar/ sidecar/
COPY fuse/ fuse/
COPY torchclient/ torchclient/
COPY src/ src/
RUN /opt/epochfs/bin/python -m pip install --no-cache-dir --disable-pip-version-check --no-index \
       --no-build-isolation -c docker/constraints.txt ".[sidecar,gcs,azure]" \
    && /opt/epochfs/bin/python -m pip uninstall --yes setuptools pip

# ---- runtime: the base, fuse3 and the venv; nothing that builds or fetches code is left -------
FROM ${BASE}
LABEL org.opencontainers.image.title="epochfs" \
      org.opencontainers.image.description="Samples a remote dataset into a node cache and serves growing epoch-N/ folders through a read-only FUSE mount" \
      org.opencontainers.image.licenses="Apache-2.0"
# fuse3: libfuse 3 (mfusepy loads it; libfuse3.so.4 on trixie, .so.3 on bookworm) and fusermount3
# (unmounts a dead mount, lets a non-root user mount). user_allow_other lets a non-root sidecar
# share its mount with the trainer's user. The base's own pip (python:slim has one) goes too.
RUN apt-get update \
    && apt-get install -y --no-install-recommends fuse3 \
    && rm -rf /var/lib/apt/lists/* \
    && echo user_allow_other >> /etc/fuse.conf \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin epochfs \
    && if python3 -m pip --version >/dev/null 2>&1; then \
         python3 -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel; fi
# One layer, exactly the venv: no wheels or build files copied in and deleted later.
COPY --from=build /opt/epochfs /opt/epochfs
ENV PATH=/opt/epochfs/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (`epochfs sample`, `status`, `cut` need nothing more). The sidecar's FUSE
# mount in Kubernetes runs as root in a privileged container: the chart sets runAsUser 0.
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % (os.environ.get('EPOCHFS_HEALTH_PORT') or 8080), timeout=4)"]
ENTRYPOINT ["epochfs", "sidecar"]
