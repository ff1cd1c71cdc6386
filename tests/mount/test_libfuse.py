"""Finding libfuse 3 whatever its soname: Debian trixie's fuse3 3.17 ships ``libfuse3.so.4``, so a
finder that looks only for ``libfuse3.so.3`` leaves the sidecar image without a mount."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from epochfs.fuse.errors import MountError
from epochfs.fuse.libfuse import find_libfuse3, from_globs, from_ldconfig


def _libs(tmp_path: Path, *names: str) -> dict[str, Path]:
    out = {}
    for name in names:
        p = tmp_path / name
        p.write_bytes(b"\x7fELF")
        out[name] = p
    return out


def test_trixie_soname_4_is_found_in_the_linker_cache(tmp_path: Path) -> None:
    libs = _libs(tmp_path, "libfuse3.so.4", "libfuse.so.2")
    listing = (
        "3 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibfuse3.so.4 (libc6,x86-64) => {libs['libfuse3.so.4']}\n"
        f"\tlibfuse.so.2 (libc6,x86-64) => {libs['libfuse.so.2']}\n"
    )
    assert from_ldconfig(listing, machine="x86_64") == [str(libs["libfuse3.so.4"])]
    assert find_libfuse3(environ={}, ldconfig=listing, patterns=()) == str(libs["libfuse3.so.4"])


def test_highest_soname_of_this_architecture_first(tmp_path: Path) -> None:
    libs = _libs(tmp_path, "libfuse3.so.3", "libfuse3.so.4", "libfuse3.so.5")
    listing = (
        f"\tlibfuse3.so.5 (libc6) => {libs['libfuse3.so.5']}\n"  # another architecture (i386)
        f"\tlibfuse3.so.3 (libc6,x86-64) => {libs['libfuse3.so.3']}\n"
        f"\tlibfuse3.so.4 (libc6,x86-64) => {libs['libfuse3.so.4']}\n"
        f"\tlibfuse3.so.9 (libc6,x86-64) => {tmp_path / 'gone.so'}\n"  # listed but not on disk
    )
    assert from_ldconfig(listing, machine="x86_64") == [
        str(libs["libfuse3.so.4"]), str(libs["libfuse3.so.3"]), str(libs["libfuse3.so.5"])]


def test_without_ldconfig_the_files_on_disk_are_searched(tmp_path: Path) -> None:
    libs = _libs(tmp_path, "libfuse3.so.4", "libfuse3.so.4.17.2", "libfuse3.so", "libfuse.so.2")
    found = from_globs([str(tmp_path / "libfuse3.so.*")])
    assert found[0] in (str(libs["libfuse3.so.4"]), str(libs["libfuse3.so.4.17.2"]))
    assert str(libs["libfuse3.so"]) not in found and str(libs["libfuse.so.2"]) not in found
    chosen = find_libfuse3(environ={}, ldconfig="", patterns=[str(tmp_path / "libfuse3.so.*")])
    assert Path(chosen).name.startswith("libfuse3.so.4")


def test_environment_wins_and_is_checked(tmp_path: Path) -> None:
    lib = _libs(tmp_path, "libfuse3.so.4")["libfuse3.so.4"]
    assert find_libfuse3(environ={"FUSE_LIBRARY_PATH": str(lib)}, ldconfig="", patterns=()) == str(lib)
    with pytest.raises(MountError, match="absolute path"):
        find_libfuse3(environ={"FUSE_LIBRARY_PATH": "libfuse3.so.4"}, ldconfig="", patterns=())
    with pytest.raises(MountError, match="FUSE_LIBRARY_PATH"):
        find_libfuse3(environ={"FUSE_LIBRARY_PATH": str(tmp_path / "nope.so")}, ldconfig="", patterns=())


def test_none_found_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MountError, match=r"libfuse 3 not found.*libfuse3\.so\.\*"):
        find_libfuse3(environ={}, ldconfig="", patterns=[str(tmp_path / "libfuse3.so.*")])


def test_the_library_found_on_this_machine_is_libfuse_3() -> None:
    try:
        path = find_libfuse3(environ={})
    except MountError:
        pytest.skip("no libfuse 3 on this machine (make system-deps installs fuse3)")
    version = ctypes.CDLL(path).fuse_version()
    assert 300 <= version < 400, (path, version)  # libfuse 3 reports major * 100 + minor


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_mount_log_names_the_library_it_loaded(tmp_path: Path) -> None:
    """``epochfs mount`` says which libfuse it loaded (version and path), so an image with the
    wrong one is found from the log."""
    from fuse_helpers import mounted, open_store

    open_store(tmp_path / "cache").close()
    with mounted(tmp_path / "cache", tmp_path / "mnt") as m:
        pass
    expected = find_libfuse3(environ={})
    line = next(x for x in m.log_text().splitlines() if "with libfuse" in x)
    assert f"from {expected}" in line and " with libfuse 3." in line
