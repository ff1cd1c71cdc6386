"""The mount's layout contract (epochfs.torchclient.layout): names, epoch-name grammar, formats.

The FUSE view writes with this module and the torch client reads with it; these tests pin the
contract itself, without torch, a store or a mount (tests/mount/test_fuse_view.py checks that the view
serves it, tests/torchclient/test_torchclient_dataset.py that the client reads it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochfs.torchclient import layout
from epochfs.torchclient.layout import (
    MANIFEST_MAGIC,
    MAX_EPOCH,
    ManifestEntry,
    ManifestError,
    epoch_dir,
    epoch_name,
    format_manifest,
    format_status,
    latest_path,
    list_epochs,
    manifest_name,
    manifest_path,
    parse_epoch_name,
    parse_manifest,
    parse_manifest_name,
    parse_status,
    read_manifest,
    read_status,
    status_path,
)

ACCEPTED = {"epoch-0": 0, "epoch-7": 7, "epoch-10": 10, "epoch-100": 100,
            f"epoch-{MAX_EPOCH}": MAX_EPOCH}
REFUSED = ["epoch-007", "epoch-00", "epoch-01", "epoch-", "epoch-x", "epoch--1", "epoch-+7", "epoch- 7",
           "epoch-7 ", " epoch-7", "epoch-7\n", "epoch-\u0667", "Epoch-7", "epoch_7", "epoch-7.0",
           f"epoch-{MAX_EPOCH + 1}", "latest", ".epochfs", ""]


def test_importing_the_layout_does_not_import_torch() -> None:
    """The FUSE server reads the layout from here: it must not pay for (or need) torch."""
    code = ("import sys, epochfs.torchclient.layout, epochfs.torchclient\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_package_still_exports_its_names_on_demand() -> None:
    import epochfs.torchclient as tc

    assert sorted(tc.__all__) == sorted(tc._SUBMODULE)
    for name in tc.__all__:
        assert getattr(tc, name) is not None
        assert name in dir(tc)
    assert tc.ManifestError is ManifestError
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = tc.no_such_name


@pytest.mark.parametrize("name,n", sorted(ACCEPTED.items()))
def test_canonical_epoch_names_are_accepted(name: str, n: int) -> None:
    assert parse_epoch_name(name) == n
    assert epoch_name(n) == name
    assert parse_manifest_name(name + ".manifest") == n
    assert manifest_name(n) == name + ".manifest"
    assert parse_manifest_name(name) is None and parse_epoch_name(name + ".manifest") is None


@pytest.mark.parametrize("name", REFUSED)
def test_other_epoch_names_are_refused(name: str) -> None:
    """One name per epoch: no leading zeros, signs, spaces, non-ASCII digits or trailing newline."""
    assert parse_epoch_name(name) is None
    assert parse_manifest_name(name + ".manifest") is None


@pytest.mark.parametrize("bad", [-1, MAX_EPOCH + 1, True, 1.0, "7"])
def test_numbers_without_a_name_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="epoch numbers"):
        epoch_name(bad)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=MAX_EPOCH))
def test_epoch_names_round_trip(n: int) -> None:
    assert parse_epoch_name(epoch_name(n)) == n
    assert parse_manifest_name(manifest_name(n)) == n


def test_paths_under_a_root(tmp_path: Path) -> None:
    assert epoch_dir(tmp_path, 3) == tmp_path / "epoch-3"
    assert manifest_path(tmp_path, 3) == tmp_path / ".epochfs" / "epoch-3.manifest"
    assert status_path(tmp_path) == tmp_path / ".epochfs" / "status.json"
    assert latest_path(tmp_path) == tmp_path / "latest"


def test_list_epochs_uses_the_strict_grammar(tmp_path: Path) -> None:
    for name in ("epoch-0", "epoch-7", "epoch-007", "epoch-01", "epoch-x", "epoch-12", ".epochfs", "latest"):
        (tmp_path / name).mkdir()
    assert list_epochs(tmp_path) == [0, 7, 12]
    assert list_epochs(tmp_path / "missing") == []


def test_manifest_format_is_exact() -> None:
    text = format_manifest(4, [("b/2.npy", 20, "md5:bb"), ManifestEntry("a.npy", 5, "md5:aa")])
    assert MANIFEST_MAGIC == f"#epochfs-manifest v{layout.MANIFEST_VERSION}" == "#epochfs-manifest v1"
    assert text == ("#epochfs-manifest v1\tepoch=4\tfiles=2\tbytes=25\n"
                    "a.npy\t5\tmd5:aa\n"
                    "b/2.npy\t20\tmd5:bb\n")
    assert format_manifest(0, []) == "#epochfs-manifest v1\tepoch=0\tfiles=0\tbytes=0\n"


@pytest.mark.parametrize("entry", [("a\tb", 1, "md5:"), ("a\nb", 1, "md5:"), ("a\rb", 1, "md5:"),
                                   ("a", 1, "md5:\t"), ("a", 1, "md5:\n")])
def test_manifest_fields_cannot_hold_separators(entry: tuple[str, int, str]) -> None:
    with pytest.raises(ValueError, match="tabs or newlines"):
        format_manifest(0, [("ok", 1, "md5:"), entry])


def test_manifest_epoch_must_have_a_name() -> None:
    with pytest.raises(ValueError, match="epoch numbers"):
        format_manifest(-1, [])


texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r"), min_size=1)


def _inside(path: str) -> bool:
    return not path.startswith("/") and ".." not in path.split("/")


paths = texts.filter(_inside)
"""Paths inside the epoch folder (one outside is refused: test_bad_input_r72.py, and below)."""


checksums = st.from_regex(r"md5:[0-9a-f]{0,32}", fullmatch=True)


@given(st.dictionaries(paths, st.tuples(st.integers(0, 1 << 40), checksums), max_size=30),
       st.integers(0, MAX_EPOCH))
def test_manifest_round_trip(files: dict[str, tuple[int, str]], epoch: int) -> None:
    text = format_manifest(epoch, [(p, size, c) for p, (size, c) in files.items()])
    parsed = parse_manifest(text, source="m", epoch=epoch)
    assert parsed.epoch == epoch
    assert parsed.paths == sorted(files)
    assert parsed.entries == tuple(ManifestEntry(p, *files[p]) for p in sorted(files))
    assert parsed.total_bytes == sum(size for size, _ in files.values())


outside = st.one_of(texts.map(lambda t: "/" + t), paths.map(lambda t: "../" + t), st.just(".."),
                    st.tuples(paths, paths).map(lambda ab: f"{ab[0]}/../{ab[1]}"))


@given(outside)
def test_a_path_outside_the_epoch_folder_is_refused(path: str) -> None:
    text = format_manifest(0, [("ok", 1, "md5:"), (path, 2, "md5:")])
    with pytest.raises(ManifestError, match="is not a path inside the epoch folder"):
        parse_manifest(text, source="m", epoch=0)


def test_other_manifest_versions_are_refused_by_name() -> None:
    refused = r"m: manifest version '2' is not supported \(this client reads v1\)"
    with pytest.raises(ManifestError, match=refused):
        parse_manifest("#epochfs-manifest v2\tepoch=0\tfiles=0\tbytes=0\n", source="m")
    with pytest.raises(ManifestError, match="line 1 is not a"):
        parse_manifest("#epochfs-manifest\tepoch=0\n", source="m")


def test_read_manifest_of_a_folder(tmp_path: Path) -> None:
    assert read_manifest(tmp_path, 0) is None
    manifest_path(tmp_path, 0).parent.mkdir()
    manifest_path(tmp_path, 0).write_text(format_manifest(0, [("x", 3, "md5:")]), encoding="utf-8")
    manifest = read_manifest(tmp_path, 0)
    assert manifest is not None and manifest.paths == ["x"] and manifest.sizes == [3]
    with pytest.raises(ManifestError, match="expected epoch=1"):
        manifest_path(tmp_path, 1).write_text(format_manifest(0, []), encoding="utf-8")
        read_manifest(tmp_path, 1)


def test_status_format_and_reading(tmp_path: Path) -> None:
    doc = {"samples": 3, "pending_cuts": [4], "latest_epoch": 2, "time": 1.5}
    text = format_status(doc)
    assert text.endswith("}\n") and json.loads(text) == doc
    assert list(json.loads(text)) == sorted(doc)  # sorted keys: stable bytes for the same document
    assert parse_status(text) == doc
    assert parse_status("[1, 2]") is None and parse_status("not json") is None
    assert read_status(tmp_path) is None
    status_path(tmp_path).parent.mkdir()
    status_path(tmp_path).write_text(text, encoding="utf-8")
    assert read_status(tmp_path) == doc
    status_path(tmp_path).write_bytes(b"\xff\xfe")
    assert read_status(tmp_path) is None


def test_one_limit_for_epoch_numbers_in_the_client_the_store_and_the_view() -> None:
    """The view's inode numbers end at MAX_EPOCH; the store (which imports nothing of the client)
    keeps the same number, and the client refuses a number past it before asking anything."""
    import tempfile

    from epochfs.fuse import inodes
    from epochfs.sidecar.store import MAX_EPOCH as STORE_MAX
    from epochfs.torchclient.waiting import wait_for_epoch

    assert STORE_MAX == MAX_EPOCH == inodes.MAX_EPOCH
    inodes.epoch_ino(MAX_EPOCH)  # has inode numbers
    with pytest.raises(inodes.NotFound):
        inodes.epoch_ino(MAX_EPOCH + 1)
    assert parse_epoch_name(f"epoch-{MAX_EPOCH + 1}") is None
    with tempfile.TemporaryDirectory() as root, pytest.raises(ValueError, match="536,870,910"):
        wait_for_epoch(root, 2_147_483_648, wait=False)
