"""Hostile remote keys: never a path outside the cache, never a broken listing."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epochfs.sidecar.keys import (
    MAX_COMPONENT_BYTES,
    MAX_COMPONENTS,
    MAX_PATH_BYTES,
    SafeKey,
    Skip,
    check_key,
    is_directory_marker,
    sample_id,
)


@pytest.mark.parametrize(
    "key",
    ["train/00001.npz", "a", "deep/er/still/x.bin", "ünïcödé/名前.npy", "with space/and-dash_1.bin",
     "dots/a..b/..c/c..", ".hidden/x", "x." * 100],
)
def test_ordinary_keys_keep_their_path(key: str) -> None:
    got = check_key(key)
    assert isinstance(got, SafeKey)
    assert got.key == key
    assert got.sid == hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("../etc/passwd", "'..' component"),
        ("a/../../b", "'..' component"),
        ("a/./b", "'.' component"),
        ("..", "'..' component"),
        (".", "'.' component"),
        ("/etc/passwd", "leading /"),
        ("a//b", "empty component (//)"),
        ("a\x00b", "NUL byte"),
        ("a\\..\\b", "backslash"),
        ("a\tb", "control character"),
        ("a\nb", "control character"),
        ("a\rb", "control character"),
        ("a\x7fb", "control character"),
        ("a\x85b", "control character"),
        ("a\u2028b", "control character"),
        ("", "empty key"),
        ("x" * 256, "component over 255 bytes"),
        ("é" * 128, "component over 255 bytes"),  # 256 bytes in UTF-8
        ("/".join(["y" * 200] * 21), "path over 4096 bytes"),
        ("d/" * 128 + "x", "path over 128 components"),
        ("train/" + "d/" * 2038 + "x", "path over 128 components"),  # 4,083 bytes, 2,040 components
        (b"bad\xffname", "not UTF-8"),
        (os.fsdecode(b"bad\xffname"), "not UTF-8"),
    ],
)
def test_hostile_keys_are_skipped_with_a_reason(key: str | bytes, reason: str) -> None:
    got = check_key(key)
    assert isinstance(got, Skip), got
    assert got.reason == reason
    got.key.encode("utf-8")  # the key as logged is always printable text


def test_limits_are_inclusive() -> None:
    assert isinstance(check_key("x" * 255), SafeKey)
    long_path = "/".join(["z" * 255] * 15 + ["y" * 200, "w" * 55])
    assert len(long_path.encode()) == 4096
    assert isinstance(check_key(long_path), SafeKey)
    assert isinstance(check_key(long_path + "w"), Skip)
    deepest = "/".join(["d"] * MAX_COMPONENTS)
    assert isinstance(check_key(deepest), SafeKey)
    assert isinstance(check_key(deepest + "/x"), Skip)


def test_bytes_keys_that_are_utf8_are_accepted() -> None:
    got = check_key("ok/é.bin".encode())
    assert isinstance(got, SafeKey) and got.key == "ok/é.bin"


def test_directory_markers() -> None:
    assert is_directory_marker("a/b/")
    assert is_directory_marker(b"a/")
    assert not is_directory_marker("a/b")


def test_sample_id_is_the_object_name_of_the_store() -> None:
    assert sample_id("k") == hashlib.blake2b(b"k", digest_size=16).hexdigest()
    assert len(sample_id("k")) == 32


@given(st.text(min_size=1, max_size=60) | st.binary(min_size=1, max_size=60))
def test_any_accepted_key_is_a_safe_relative_path(key: str | bytes) -> None:
    got = check_key(key)
    if isinstance(got, Skip):
        return
    path = got.key
    assert not path.startswith("/")
    assert not os.path.isabs(path)
    assert os.path.normpath(path) == path, "normalization would change it: not canonical"
    joined = os.path.normpath(os.path.join("/cache/epoch-0", path))
    assert joined.startswith("/cache/epoch-0/")
    assert "\t" not in path and "\n" not in path and len(path.splitlines()) == 1


def _reference_reason(text: str) -> str | None:
    """The rules spelled out character by character and component by component (what the key
    check did before it used regular expressions for its fast path)."""
    if not text:
        return "empty key"
    if "\x00" in text:
        return "NUL byte"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in text):
        return "control character"
    if "\\" in text:
        return "backslash"
    if text.startswith("/"):
        return "leading /"
    if len(text.encode()) > MAX_PATH_BYTES:
        return f"path over {MAX_PATH_BYTES} bytes"
    if len(text.split("/")) > MAX_COMPONENTS:
        return f"path over {MAX_COMPONENTS} components"
    for part in text.split("/"):
        if part == "":
            return "empty component (//)"
        if part in (".", ".."):
            return f"{part!r} component"
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            return f"component over {MAX_COMPONENT_BYTES} bytes"
    return None


_KEY_PARTS = st.sampled_from(["/", ".", "..", "a", "é", "\x1f", "\x7f", "\x9f", "\xa0", "\u2028",
                              "\\", "x" * 200, "名" * 40, "\t"])


_DEEP_KEYS = st.lists(st.sampled_from(["d/", "/", "é/", "x", "../"]), min_size=150, max_size=170).map("".join)


@given(st.lists(_KEY_PARTS, max_size=12).map("".join) | st.text(max_size=40) | _DEEP_KEYS)
def test_the_fast_key_check_refuses_what_the_rules_say(text: str) -> None:
    got = check_key(text)
    want = _reference_reason(text)
    assert (got.reason if isinstance(got, Skip) else None) == want
