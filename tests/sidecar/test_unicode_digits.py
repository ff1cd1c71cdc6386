"""Numbers read from names, headers and annotations that ``str.isdigit`` calls digits but
``int`` refuses ("²", "①"): each parser answers "not a number" as for any other bad text, never
a ValueError out of ``int`` (the webhook answered 500, a temp named so would stop recovery)."""

from __future__ import annotations

import pytest

from epochfs.sidecar.remote.checksums import multipart_etag
from epochfs.sidecar.store.memberformat import number_of
from epochfs.sidecar.store.objects import writer_gone
from epochfs.torchclient.layout import MANIFEST_MAGIC, ManifestError, parse_manifest

NOT_INT = ["\u00b2", "1\u00b2", "\u2460"]  # superscript two, "1²", circled one


@pytest.mark.parametrize("text", NOT_INT)
def test_int_refuses_them(text: str) -> None:
    assert text.isdigit()
    with pytest.raises(ValueError):
        int(text)


@pytest.mark.parametrize("text", NOT_INT)
def test_a_multipart_etag_with_such_a_part_count_is_not_multipart(text: str) -> None:
    assert multipart_etag('"' + "a" * 32 + "-" + text + '"') is None
    assert multipart_etag('"' + "a" * 32 + '-3"') == ("a" * 32, 3)


@pytest.mark.parametrize("text", NOT_INT)
def test_a_members_file_so_named_has_no_number(text: str) -> None:
    assert number_of(f"epoch-{text}.members") is None
    assert number_of("epoch-12.members") == 12


@pytest.mark.parametrize("text", NOT_INT)
def test_a_temp_so_named_is_nobodys(text: str) -> None:
    assert writer_gone(text)


@pytest.mark.parametrize("text", NOT_INT)
def test_a_manifest_with_such_a_size_is_a_manifest_error(text: str) -> None:
    with pytest.raises(ManifestError, match="bad header field"):
        parse_manifest(f"{MANIFEST_MAGIC}\tepoch=0\tfiles=0\tbytes={text}\n", source="m")
