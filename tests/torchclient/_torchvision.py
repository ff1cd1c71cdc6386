"""torchvision for the tests that run its own code (``ImageFolder``, ``find_classes``, transforms).

The dev environment pins torch 2.13.0's CPU build (the Makefile, so that no multi-GB CUDA build is
pulled). PyPI's torchvision for that release, 0.28.0, is a CUDA build: its C extension links CUDA
torch, does not load next to the CPU torch, and ``import torchvision`` then fails in
``torchvision._meta_registrations`` (it registers fake kernels for the extension's operators) with
``RuntimeError: operator torchvision::nms does not exist``.

:func:`torchvision` imports torchvision normally; only when that fails in that way does it import
it again with ``torchvision._meta_registrations`` replaced by an empty module. Nothing else in the
package needs the extension at import, so its pure-Python parts work: ``datasets.ImageFolder``,
``datasets.folder.find_classes`` and ``transforms.v2`` on tensors, which is all the tests use.
What needs the extension stays unavailable: ``torchvision.ops`` and torchvision.io's decoders
(``decode_image`` and ``read_file`` raise "Couldn't load the image extension" when called), so
``decode="image"`` must find torchvision.io unusable and decode with Pillow
(tests/torchclient/test_image_decoder_choice.py checks that with this torchvision). A torchvision
built for the installed torch is imported as it is, extension and all.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

_META = "torchvision._meta_registrations"


def torchvision() -> Any:
    """The torchvision module (its pure-Python parts at least); raises ImportError when there is
    none, or when it fails to import for any reason other than its C extension's operators."""
    try:
        import torchvision as tv
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        # The extension did not load (a CUDA wheel beside a CPU torch): what registers its operators'
        # fake kernels is the one module that fails without it.
        sys.modules.setdefault(_META, types.ModuleType(_META))
        import torchvision as tv
    return tv


def extension_loaded() -> bool:
    """Whether torchvision's C extension (its ops, its image decoders) loaded."""
    from torchvision.extension import _has_ops

    return bool(_has_ops())


def require() -> Any:
    """:func:`torchvision`, or the test skipped where torchvision is not installed (it is in the dev
    environment: pyproject's ``dev`` extra). A torchvision that is there but fails to import for
    another reason fails the test."""
    try:
        return torchvision()
    except ModuleNotFoundError as missing:
        if missing.name != "torchvision":
            raise
        pytest.skip("torchvision is not installed (pip install 'epochfs[dev]')")
