"""The include/exclude rule (issue 22, "Choose the files"): one module, ``epochfs.torchclient.globs``,
read by the sidecar's ``--include``/``--exclude`` and by the loaders' ``include=``/``exclude=``.
Every example of docs/listing.md's table is checked here, and what is refused up front."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from epochfs.torchclient.globs import GlobError, Globs, KeyFilter, split_globs

KEYS = ["a.npy", "arrays/a.npy", "x/y/a.npy", "a.npy.json", "meta.json", "train/meta.json",
        "train/a.png", "train/cat/a.png", "x/train/a.png", "train", "trains/a", "a/b.npz",
        "a/x/b.npz", "a/x/y/b.npz", "ab.npz", "cat-07.png", "cat-7.png", "_hidden", ".dot", "plain",
        "train/cat/meta.json"]


def kept(include: object = None, exclude: object = None) -> list[str]:
    f = KeyFilter(include, exclude)  # type: ignore[arg-type]
    return [k for k in KEYS if f.keep(k)]


@pytest.mark.parametrize(
    ("pattern", "matches"),
    [
        ("*.npy", ["a.npy", "arrays/a.npy", "x/y/a.npy"]),
        ("/*.json", ["a.npy.json", "meta.json"]),
        ("train/*.png", ["train/a.png"]),
        ("train/**", ["train/meta.json", "train/a.png", "train/cat/a.png", "train/cat/meta.json"]),
        ("train/", ["train/meta.json", "train/a.png", "train/cat/a.png", "train/cat/meta.json"]),
        ("**/*.json", ["a.npy.json", "meta.json", "train/meta.json", "train/cat/meta.json"]),
        ("*.json", ["a.npy.json", "meta.json", "train/meta.json", "train/cat/meta.json"]),
        ("a/**/b.npz", ["a/b.npz", "a/x/b.npz", "a/x/y/b.npz"]),
        ("cat-[0-9]?.png", ["cat-07.png"]),
        ("/[!._]*", [k for k in KEYS if "/" not in k and k[0] not in "._"]),
        ("**", KEYS),
        ("train", ["train"]),
        ("cat-?.png", ["cat-7.png"]),
    ],
)
def test_each_documented_pattern_matches_what_the_table_says(pattern: str, matches: list[str]) -> None:
    assert kept(include=pattern) == matches
    assert kept(exclude=pattern) == [k for k in KEYS if k not in matches]


def test_a_key_is_kept_by_any_include_and_no_exclude() -> None:
    assert kept() == KEYS
    assert kept(include="*.npy,train/**", exclude="**/*.json") == [
        "a.npy", "arrays/a.npy", "x/y/a.npy", "train/a.png", "train/cat/a.png"]
    assert kept(include=["*.npy", "train/**"], exclude=["*.json"]) == kept(
        include="*.npy, train/**", exclude=" **/*.json ")
    assert kept(include=[]) == KEYS  # no include given: every key
    assert KeyFilter("*.npy").keep("A.NPY") is False  # case-sensitive, as S3 keys are
    assert not KeyFilter() and KeyFilter(exclude="x") and KeyFilter(include=[]).describe() == ""


def test_sets_are_fnmatch_sets_that_never_match_a_slash() -> None:
    assert KeyFilter("a[,]b").include == ("a[,]b",)  # a comma in a set is the set's
    assert KeyFilter("a[,]b").keep("a,b")
    assert split_globs("x[],]y, z") == ["x[],]y", "z"]
    assert KeyFilter("a[!x]b").keep("a/b") is False
    assert KeyFilter("/a[.-0]b").keep("a/b") is False  # a range spanning '/' still skips it
    assert KeyFilter("/a[.-0]b").keep("a.b")
    assert KeyFilter("[*]").keep("*") and not KeyFilter("[*]").keep("x")  # a literal star
    assert KeyFilter("a[b").keep("a[b")  # an unclosed [ is itself


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "an empty pattern"),
        ("a,,b", "an empty pattern in 'a,,b'"),
        ("*.npy,", "an empty pattern in"),
        ("a\x00b", "NUL"),
        ("a//b", "an empty path component"),
        ("./train/**", "a '.' component"),
        ("train/../x", "a '..' component"),
        ("a**", "'**' must be a whole path component"),
        ("train/**x/y", "'**' must be a whole path component"),
        ("[z-a]", "not a valid pattern"),
        ("/", "names no file"),
    ],
)
def test_bad_patterns_are_refused_up_front(value: str, words: str) -> None:
    with pytest.raises(GlobError, match="^include: .*" + re.escape(words)):
        KeyFilter(include=value)
    with pytest.raises(ValueError, match=r"^exclude: "):
        KeyFilter(exclude=[value] if "," not in value else value)


def test_a_setting_writes_back_what_it_read() -> None:
    """The sidecar hands its settings to the sampler child through EPOCHFS_* variables (str)."""
    for text in ("*.npy", "*.npy, train/**", "a[,]b,c"):
        globs = Globs.parse(text)
        assert Globs.parse(str(globs)) == globs
    assert str(Globs.parse(" *.npy , train/** ")) == "*.npy,train/**"


def test_the_same_choice_in_another_order_is_the_same_listing() -> None:
    a = KeyFilter("*.npy,train/**", "*.json")
    b = KeyFilter(["train/**", "*.npy", "*.npy"], ["*.json"])
    assert a.describe() == b.describe() != KeyFilter("*.npy").describe()
    assert KeyFilter("*.npy").describe() != KeyFilter(exclude="*.npy").describe()


def test_importing_the_rule_imports_no_torch() -> None:
    code = "import sys, epochfs.torchclient.globs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
