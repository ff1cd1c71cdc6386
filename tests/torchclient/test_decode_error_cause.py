"""``SampleDecodeError`` names the cause that fits, not always a corrupt file.

It used to end every message with "(the file is corrupt, truncated or not in this format)", also
for a valid ``.npy`` of a dtype torch has no tensor type for (``np.array(["ab", "cd"])``) and for
the user's own ``decode=`` callable raising. Now the first says the array's dtype cannot become a
tensor (naming it) and the second that the user's decode function raised (naming it); a corrupt
file keeps its message. Real files, the real decoders, and a real DataLoader worker for the one
that travels back to the training process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.decode import SampleDecodeError, load_sample, resolve_decoder
from epochfs.torchclient.plainfolder import publish_epoch

CORRUPT = "the file is corrupt, truncated or not in this format"


def my_decoder(path: str) -> Any:
    """A user's decoder that fails on every file (module level: it pickles into workers)."""
    raise ValueError(f"my_decoder cannot read {path}")


class CallableDecoder:
    """A user's decoder that is an instance, unhashable (it defines ``__eq__`` only)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallableDecoder)

    def __call__(self, path: str) -> Any:
        raise RuntimeError("no")


@pytest.mark.parametrize("array", [np.array(["ab", "cd"]), np.array([b"ab"]), np.zeros(2, "M8[s]")],
                         ids=["str", "bytes", "datetime64"])
@pytest.mark.parametrize("decode", ["npy", "auto"])
def test_a_valid_array_of_an_unsupported_dtype_names_the_dtype(
        tmp_path: Path, array: Any, decode: str) -> None:
    path = tmp_path / "s.npy"
    np.save(path, array)
    with pytest.raises(SampleDecodeError) as raised:
        load_sample(str(path), resolve_decoder(decode))
    said = str(raised.value)
    assert CORRUPT not in said, said
    assert f"the array's dtype {array.dtype} cannot become a tensor" in said, said
    assert raised.value.path == str(path)


def test_an_npz_member_of_an_unsupported_dtype_names_the_dtype(tmp_path: Path) -> None:
    path = tmp_path / "s.npz"
    np.savez(path, x=np.array(["ab"]))
    with pytest.raises(SampleDecodeError) as raised:
        load_sample(str(path), resolve_decoder("npz", max_array_bytes=1 << 20))
    assert CORRUPT not in str(raised.value) and "dtype <U2 cannot become a tensor" in str(raised.value)


@pytest.mark.parametrize("decoder", [my_decoder, CallableDecoder()], ids=["function", "instance"])
def test_the_users_own_decoder_is_said_to_have_raised(tmp_path: Path, decoder: Any) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"fine bytes")
    with pytest.raises(SampleDecodeError) as raised:
        load_sample(str(path), resolve_decoder(decoder))
    said = str(raised.value)
    name = "my_decoder" if decoder is my_decoder else "CallableDecoder"
    assert CORRUPT not in said, said
    assert f"your decode= function {__name__}.{name} raised" in said, said


def test_the_users_decoder_raising_in_a_worker_says_so_in_the_training_process(tmp_path: Path) -> None:
    objects, root = tmp_path / "objects", tmp_path / "mnt"
    objects.mkdir()
    (objects / "a").write_bytes(b"fine bytes")
    publish_epoch(root, 0, {"train/a.bin": objects / "a"})
    loader = EpochLoader(root, batch_size=1, decode=my_decoder, num_workers=1, progress=None, report=False)
    with loader, pytest.raises(SampleDecodeError) as raised:
        list(loader.epoch(0))
    said = str(raised.value)
    assert CORRUPT not in said, said
    assert f"your decode= function {__name__}.my_decoder raised ValueError" in said, said


def test_a_corrupt_file_still_says_so(tmp_path: Path) -> None:
    path = tmp_path / "a.pt"
    path.write_bytes(b"not a torch file")
    with pytest.raises(SampleDecodeError) as raised:
        load_sample(str(path), resolve_decoder("pt"))
    assert CORRUPT in str(raised.value) and "with decode_pt" in str(raised.value)


def test_a_stray_file_of_another_kind_is_told_how_to_leave_it_out(tmp_path: Path) -> None:
    """A ``notes.txt`` in an image epoch stopped ``EpochLoader(decode="image")`` with the image
    library's words alone; the message names include=/exclude= (``EpochImageFolder`` leaves such
    files out by default, the loader decodes every file it is given)."""
    path = tmp_path / "notes.txt"
    path.write_text("labels are the folder names")
    with pytest.raises(SampleDecodeError) as raised:
        load_sample(str(path), resolve_decoder("image"))
    assert CORRUPT in str(raised.value) and "exclude=['*.txt']" in str(raised.value), raised.value
