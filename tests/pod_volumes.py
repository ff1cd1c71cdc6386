"""A pod's volumes as host folders, laid out and owned the way the kubelet lays them out.

Why: the container test runs the chart's pod with docker, and what makes a FUSE view reach the
trainer, or not, is the volume plumbing: every volume is a folder inside one pod folder that is
bind-mounted onto itself and made rshared, as the kubelet's pods folder is on a node, so a
`Bidirectional` mount (rshared) carries a mount made in one container out to the host and into
every `HostToContainer` (rslave) mount of the same volume. emptyDir is mode 0777 and, with a pod
fsGroup, group-owned by it with the setgid bit (the kubelet's SetVolumeOwnership); a memory
emptyDir is a tmpfs; hostPath is a folder under a fake node root; Secret, ConfigMap, downwardAPI
and projected volumes are files written once and always mounted read-only.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pod_env import PodError, PodIdentity, PodObjects, expand, field_ref, quantity

FOLDER_TYPES = ("emptyDir", "hostPath", "ephemeral", "persistentVolumeClaim")
FILE_TYPES = ("secret", "configMap", "downwardAPI", "projected")


@dataclass
class HostVolume:
    """One volume on the host: its folder, and whether every mount of it is read-only."""

    name: str
    path: Path
    read_only: bool = False


def mount_points(under: Path) -> list[str]:
    """Mount points at or below ``under`` in this mount namespace (/proc/self/mountinfo)."""
    base = str(under)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")  # \040 and friends
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return found


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def _own(path: Path, fs_group: int | None, mode: int) -> None:
    """Ownership and mode of a fresh volume folder, with the kubelet's fsGroup rules."""
    if fs_group is not None:
        os.chown(path, -1, fs_group)
        mode |= 0o2070  # group rwx and setgid, so what is created inside keeps the group
    path.chmod(mode)


def _write_files(folder: Path, files: dict[str, str], mode: int, fs_group: int | None) -> None:
    for rel, content in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        if fs_group is not None:
            os.chown(target, -1, fs_group)
        target.chmod(mode)


def _key_files(data: dict[str, str] | None, source: dict[str, Any], kind: str) -> dict[str, str]:
    if data is None:
        if source.get("optional"):
            return {}
        raise PodError(f"{kind} {source.get('name') or source.get('secretName')!r} not found")
    items = source.get("items")
    if not items:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in items}


def _downward_files(items: list[dict[str, Any]], identity: PodIdentity,
                    spec: dict[str, Any]) -> dict[str, str]:
    out = {}
    for item in items:
        if "fieldRef" not in item:
            raise PodError("downwardAPI volume: only fieldRef items are supported here")
        out[item["path"]] = field_ref(item["fieldRef"]["fieldPath"], identity, spec)
    return out


def _projected_files(sources: list[dict[str, Any]], objects: PodObjects, identity: PodIdentity,
                     spec: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for source in sources:
        if "serviceAccountToken" in source:
            out[source["serviceAccountToken"]["path"]] = objects.token
        elif "configMap" in source:
            ref = source["configMap"]
            out.update(_key_files(objects.config_maps.get(ref["name"]), ref, "ConfigMap"))
        elif "secret" in source:
            ref = source["secret"]
            out.update(_key_files(objects.secrets.get(ref["name"]), ref, "Secret"))
        elif "downwardAPI" in source:
            out.update(_downward_files(source["downwardAPI"]["items"], identity, spec))
        else:
            raise PodError(f"projected volume: unsupported source {sorted(source)}")
    return out


@dataclass
class PodVolumes:
    """The pod folder and its volumes; ``setup`` makes them, ``teardown`` undoes the mounts."""

    root: Path
    spec: dict[str, Any]
    identity: PodIdentity
    objects: PodObjects
    node_root: Path

    def __post_init__(self) -> None:
        self.volumes: dict[str, HostVolume] = {}
        self.own_mounts: list[str] = []

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        # The pods folder of a node is a shared mount: what propagates out of a container lands
        # here, and from here in every rslave mount of the same folder.
        _run("mount", "--bind", str(self.root), str(self.root))
        self.own_mounts.append(str(self.root))
        _run("mount", "--make-rshared", str(self.root))
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")
        for vol in self.spec.get("volumes", []):
            self.volumes[vol["name"]] = self._make(vol, fs_group)

    def _make(self, vol: dict[str, Any], fs_group: int | None) -> HostVolume:
        name = vol["name"]
        kind = next((k for k in (*FOLDER_TYPES, *FILE_TYPES) if k in vol), None)
        if kind is None:
            raise PodError(f"volume {name}: unsupported type {sorted(set(vol) - {'name'})}")
        if kind == "hostPath":
            path = self.node_root / vol["hostPath"]["path"].lstrip("/")
            htype = vol["hostPath"].get("type", "")
            if htype == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            elif htype == "Directory" and not path.is_dir():
                raise PodError(f"volume {name}: hostPath {path} is not a directory")
            elif htype not in ("", "Directory"):
                raise PodError(f"volume {name}: hostPath type {htype} is not supported here")
            return HostVolume(name, path)  # fsGroup does not apply to hostPath
        path = self.root / "volumes" / name
        path.mkdir(parents=True)
        if kind == "emptyDir" and (vol["emptyDir"] or {}).get("medium") == "Memory":
            size = (vol["emptyDir"] or {}).get("sizeLimit")
            opts = "mode=0777" + (f",size={int(quantity(size))}" if size else "")
            _run("mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path))
            self.own_mounts.append(str(path))
        if kind in FOLDER_TYPES:
            _own(path, fs_group, 0o777)
            return HostVolume(name, path)
        src = vol[kind]
        mode = int(src.get("defaultMode", 0o644))
        if kind == "secret":
            files = _key_files(self.objects.secrets.get(src["secretName"]), src, "Secret")
        elif kind == "configMap":
            files = _key_files(self.objects.config_maps.get(src["name"]), src, "ConfigMap")
        elif kind == "downwardAPI":
            files = _downward_files(src["items"], self.identity, self.spec)
        else:
            files = _projected_files(src["sources"], self.objects, self.identity, self.spec)
        _write_files(path, files, mode, fs_group)
        _own(path, fs_group, 0o755)
        return HostVolume(name, path, read_only=True)

    def source(self, mount: dict[str, Any], env: dict[str, str]) -> Path:
        """The host path a volumeMount binds: the volume folder, or its subPath / subPathExpr
        (created like the kubelet does, with the volume folder's mode and group)."""
        try:
            vol = self.volumes[mount["name"]]
        except KeyError:
            raise PodError(f"volumeMount of an undeclared volume {mount['name']!r}") from None
        sub = mount.get("subPath") or expand(mount.get("subPathExpr", ""), env)
        if not sub:
            return vol.path
        if sub.startswith("/") or ".." in Path(sub).parts:
            raise PodError(f"subPath {sub!r} must be a relative path inside the volume")
        path = vol.path / sub
        if not path.exists():
            st = vol.path.stat()
            path.mkdir(parents=True)
            os.chown(path, -1, st.st_gid)
            path.chmod(st.st_mode & 0o7777)
        return path

    def leftover_mounts(self) -> list[str]:
        """Mounts under the pod folder that this runner did not make (a FUSE mount left behind)."""
        return [p for p in mount_points(self.root) if p not in self.own_mounts]

    def teardown(self) -> None:
        """Unmount everything under the pod folder, deepest first (a leftover FUSE mount too, so
        a failed test leaves nothing behind), then the runner's own mounts."""
        for _ in range(5):  # stacked mounts need one umount each
            points = mount_points(self.root)
            if not points:
                break
            for point in sorted(set(points), key=len, reverse=True):
                if subprocess.run(["umount", point], capture_output=True, timeout=60).returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)
        self.own_mounts.clear()
