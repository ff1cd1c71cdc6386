#!/usr/bin/env bash
# The base image of the container test, made locally: no image registry is reachable from the
# machines this runs on, so the Dockerfile's default base (python:3.11.x-slim-trixie) cannot be
# pulled. `debootstrap --variant=minbase` makes a minimal Debian trixie with python3 (3.13),
# python3-venv and ca-certificates; the machine's CA bundle replaces the image's so pip and apt in
# the build get through a TLS-intercepting proxy; `docker import` makes it an image with the PATH
# and LANG a python:slim image has. The Dockerfile takes it as `--build-arg BASE=<tag>`.
#
# Usage: scripts/container-base.sh CACHE_DIR [REPOSITORY]   (DOCKER_HOST names the engine)
# Prints the image tag, REPOSITORY:<key>, where key is a hash of everything that goes into the
# image (suite, mirror, packages, this script, the CA bundle): a second run with the same inputs
# finds the image, or the rootfs tarball kept in CACHE_DIR, and takes seconds.
set -euo pipefail
cache=${1:?usage: container-base.sh CACHE_DIR [REPOSITORY]}
repo=${2:-epochfs-ct/base}
suite=${EPOCHFS_CT_SUITE:-trixie}
mirror=${EPOCHFS_CT_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-venv,ca-certificates
ca=/etc/ssl/certs/ca-certificates.crt

mkdir -p "$cache"
key=$({ echo "$suite $mirror $packages"; cat "$0" "$ca"; } | sha256sum | cut -c1-16)
tag="$repo:$key"
tarball="$cache/base-$key.tar"

exec 9>"$cache/.base.lock"
flock 9   # two runs at once: one builds, the other waits and finds it
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  rootfs="$cache/rootfs-$key"
  rm -rf "$rootfs"
  echo "container-base: debootstrap $suite into $rootfs (about a minute)" >&2
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
      >"$cache/debootstrap-$key.log" 2>&1; then
    tail -n 30 "$cache/debootstrap-$key.log" >&2
    exit 1
  fi
  cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$rootfs"
fi
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tarball" "$tag" >/dev/null
echo "$tag"
