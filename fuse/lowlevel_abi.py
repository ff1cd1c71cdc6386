"""ctypes declarations of the part of libfuse 3's low-level API the adapter uses (fuse_lowlevel.h).

mfusepy binds only the high-level API; this module declares the structures and calls of the
low-level one, checked against libfuse 3.14 (Debian bookworm) and 3.17 (trixie, the image):

* ``struct fuse_lowlevel_ops`` is a list of function pointers in a fixed order; libfuse is told its
  size, so later libfuse versions see the calls they added as unset;
* ``struct fuse_file_info``: only ``flags`` (offset 0), the bit word after it (``direct_io`` bit 1,
  ``keep_cache`` bit 2 in both versions) and ``fh`` (offset 16 in both) are touched;
* ``struct fuse_conn_info``: ``capable`` and ``want`` at offsets 20 and 24 (3.17 converts a changed
  ``want`` into its 64-bit ``want_ext`` itself);
* the multi-threaded loop is ``fuse_session_loop_mt_312`` with a config from ``fuse_loop_cfg_create``
  (exported by both; the unversioned name would bind an older ABI on some builds), its threads set
  by ``fuse_loop_cfg_set_max_threads`` and ``fuse_loop_cfg_set_idle_threads`` (libfuse 3.12 too).
"""

from __future__ import annotations

import ctypes
from typing import Any

import mfusepy

c_ino = ctypes.c_uint64
c_req = ctypes.c_void_p

OPS_ORDER = (
    "init", "destroy", "lookup", "forget", "getattr", "setattr", "readlink", "mknod", "mkdir",
    "unlink", "rmdir", "symlink", "rename", "link", "open", "read", "write", "flush", "release",
    "fsync", "opendir", "readdir", "releasedir", "fsyncdir", "statfs", "setxattr", "getxattr",
    "listxattr", "removexattr", "access", "create", "getlk", "setlk", "bmap", "ioctl", "poll",
    "write_buf", "retrieve_reply", "forget_multi", "flock", "fallocate", "readdirplus",
    "copy_file_range", "lseek",
)


class LowLevelOps(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in OPS_ORDER]


class EntryParam(ctypes.Structure):
    _fields_ = [
        ("ino", c_ino),
        ("generation", ctypes.c_uint64),
        ("attr", mfusepy.c_stat),
        ("attr_timeout", ctypes.c_double),
        ("entry_timeout", ctypes.c_double),
    ]


class FileInfo(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_int32),
        ("bits", ctypes.c_uint32),
        ("padding2", ctypes.c_uint32),
        ("padding3", ctypes.c_uint32),
        ("fh", ctypes.c_uint64),
    ]


DIRECT_IO_BIT = 1 << 1
KEEP_CACHE_BIT = 1 << 2


class ConnInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "proto_major", "proto_minor", "max_write", "max_read", "max_readahead", "capable", "want",
    )]


class Args(ctypes.Structure):
    _fields_ = [("argc", ctypes.c_int), ("argv", ctypes.POINTER(ctypes.c_char_p)),
                ("allocated", ctypes.c_int)]


P = ctypes.c_void_p
INT = ctypes.c_int
U = ctypes.c_uint
S = ctypes.c_char_p
SZ = ctypes.c_size_t
OFF = ctypes.c_int64
MODE = ctypes.c_uint32
FI = ctypes.POINTER(FileInfo)

CALLBACK_TYPES: dict[str, Any] = {
    "init": ctypes.CFUNCTYPE(None, P, ctypes.POINTER(ConnInfo)),
    "destroy": ctypes.CFUNCTYPE(None, P),
    "lookup": ctypes.CFUNCTYPE(None, c_req, c_ino, S),
    "getattr": ctypes.CFUNCTYPE(None, c_req, c_ino, FI),
    "setattr": ctypes.CFUNCTYPE(None, c_req, c_ino, P, INT, FI),
    "readlink": ctypes.CFUNCTYPE(None, c_req, c_ino),
    "mknod": ctypes.CFUNCTYPE(None, c_req, c_ino, S, MODE, ctypes.c_uint64),
    "mkdir": ctypes.CFUNCTYPE(None, c_req, c_ino, S, MODE),
    "unlink": ctypes.CFUNCTYPE(None, c_req, c_ino, S),
    "rmdir": ctypes.CFUNCTYPE(None, c_req, c_ino, S),
    "symlink": ctypes.CFUNCTYPE(None, c_req, S, c_ino, S),
    "rename": ctypes.CFUNCTYPE(None, c_req, c_ino, S, c_ino, S, U),
    "link": ctypes.CFUNCTYPE(None, c_req, c_ino, c_ino, S),
    "open": ctypes.CFUNCTYPE(None, c_req, c_ino, FI),
    "read": ctypes.CFUNCTYPE(None, c_req, c_ino, SZ, OFF, FI),
    "write": ctypes.CFUNCTYPE(None, c_req, c_ino, P, SZ, OFF, FI),
    "release": ctypes.CFUNCTYPE(None, c_req, c_ino, FI),
    "opendir": ctypes.CFUNCTYPE(None, c_req, c_ino, FI),
    "readdir": ctypes.CFUNCTYPE(None, c_req, c_ino, SZ, OFF, FI),
    "readdirplus": ctypes.CFUNCTYPE(None, c_req, c_ino, SZ, OFF, FI),
    "releasedir": ctypes.CFUNCTYPE(None, c_req, c_ino, FI),
    "statfs": ctypes.CFUNCTYPE(None, c_req, c_ino),
    "setxattr": ctypes.CFUNCTYPE(None, c_req, c_ino, S, P, SZ, INT),
    "removexattr": ctypes.CFUNCTYPE(None, c_req, c_ino, S),
    "create": ctypes.CFUNCTYPE(None, c_req, c_ino, S, MODE, FI),
    "fallocate": ctypes.CFUNCTYPE(None, c_req, c_ino, INT, OFF, OFF, FI),
}

_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "fuse_session_new": ([ctypes.POINTER(Args), ctypes.POINTER(LowLevelOps), SZ, P], P),
    "fuse_session_mount": ([P, S], INT),
    "fuse_session_unmount": ([P], None),
    "fuse_session_destroy": ([P], None),
    "fuse_session_exit": ([P], None),
    "fuse_session_exited": ([P], INT),
    "fuse_loop_cfg_create": ([], P),
    "fuse_loop_cfg_destroy": ([P], None),
    "fuse_loop_cfg_set_max_threads": ([P, ctypes.c_uint], None),
    "fuse_loop_cfg_set_idle_threads": ([P, ctypes.c_uint], None),
    "fuse_session_loop_mt_312": ([P, P], INT),
    "fuse_reply_err": ([c_req, INT], INT),
    "fuse_reply_none": ([c_req], None),
    "fuse_reply_entry": ([c_req, ctypes.POINTER(EntryParam)], INT),
    "fuse_reply_attr": ([c_req, ctypes.POINTER(mfusepy.c_stat), ctypes.c_double], INT),
    "fuse_reply_readlink": ([c_req, S], INT),
    "fuse_reply_open": ([c_req, FI], INT),
    "fuse_reply_buf": ([c_req, P, SZ], INT),
    "fuse_reply_statfs": ([c_req, ctypes.POINTER(mfusepy.c_statvfs)], INT),
    "fuse_add_direntry": ([c_req, P, SZ, S, ctypes.POINTER(mfusepy.c_stat), OFF], SZ),
    "fuse_add_direntry_plus": ([c_req, P, SZ, S, ctypes.POINTER(EntryParam), OFF], SZ),
}


class MissingCall(RuntimeError):
    """The loaded libfuse lacks a call the low-level adapter needs."""


def bind(lib: Any = None) -> Any:
    """``lib`` (default: the libfuse mfusepy loaded) with the low-level calls declared; MissingCall
    naming the first one it lacks."""
    lib = mfusepy._libfuse if lib is None else lib
    for name, (argtypes, restype) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise MissingCall(f"libfuse has no {name}") from e
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


def make_args(argv: list[bytes]) -> tuple[Args, Any]:
    """A ``struct fuse_args`` over ``argv`` and the array that must outlive it."""
    array = (ctypes.c_char_p * (len(argv) + 1))(*argv, None)
    return Args(len(argv), ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p)), 0), array
