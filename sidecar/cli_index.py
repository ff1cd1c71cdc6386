"""``epochfs index``: list a remote once, in parallel, into an index file that sidecars read with
``--index``.

Apart from :mod:`.cli` because it is the one command with checks of its own before it runs (a
``--out`` that cannot be written is refused before a listing of minutes, not after it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from epochfs.sidecar import config, redact


def cmd_index(ns: argparse.Namespace) -> int:
    """List a remote once (in parallel) into an index file that sidecars read with --index."""
    from epochfs.sidecar.confparse import _bounded, _positive_int, _remote
    from epochfs.sidecar.listing.indexfile import write_index
    from epochfs.sidecar.remote import RemoteError, open_remote
    from epochfs.sidecar.remote.objects import WriteError

    try:
        url = _remote(ns.remote)
    except ValueError as e:
        raise config.ConfigError(f"REMOTE: {e}") from None
    try:
        threads = _bounded(_positive_int, config.MAX_LIST_THREADS, "a thread each")(ns.list_threads)
    except ValueError as e:
        raise config.ConfigError(f"--list-threads: {e}") from None
    _check_local_out(ns.out)
    try:
        remote = open_remote(url, endpoint_url=ns.endpoint_url)
    except RemoteError as e:
        raise config.ConfigError(f"REMOTE: {e}") from None
    from epochfs.sidecar.progressbar import Progress

    bar = Progress("index:", out=sys.stderr, unit="spans")  # a bar on a terminal, else log lines
    try:
        count = write_index(remote, ns.out, threads=threads, endpoint_url=ns.endpoint_url, progress=bar,
                            plain=not _gzipped_name(ns.out), order=ns.order)
    except WriteError as e:  # writing --out (any store's failure, as one line): the flag named
        print(redact.redact(f"epochfs index: --out: {e}"), file=sys.stderr)
        return 1
    except (RemoteError, OSError) as e:  # the remote, or the listing's files: one line, no traceback
        print(redact.redact(f"epochfs index: {e}"), file=sys.stderr)
        return 1
    finally:
        remote.close()
    print(count)
    return 0


def _check_local_out(out: str) -> None:
    """Refuse a local ``--out`` that cannot be written before the listing runs (it ran to its end,
    minutes on a large bucket, then failed with a traceback; and a missing folder was made):
    a folder, a path under a missing or read-only folder."""
    if "://" in out and not out.startswith("file://"):
        return  # a remote URL: its store says at the upload
    path = Path(out.removeprefix("file://")).expanduser()
    if path.is_dir():
        raise config.ConfigError(f"--out {out}: is a folder; name the index file ({path}/index.jsonl.gz)")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise config.ConfigError(f"--out {out}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise config.ConfigError(f"--out {out}: the folder {parent} does not exist")
    import tempfile

    try:  # a file made and removed: as root os.access says yes to /proc and to read-only mounts
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".epochfs-index-probe-"):
            pass
    except OSError as e:
        raise config.ConfigError(f"--out {out}: cannot write in {parent}: {e.strerror}") from None


def _gzipped_name(out: str) -> bool:
    """Whether ``epochfs index --out`` names a gzip file (its path ends in ``.gz``; a URL's query
    is not part of the name; an object store key's '#' and '?' are: :func:`.remote.urls.split_url`)."""
    from epochfs.sidecar.remote.urls import HTTP_SCHEMES, split_url

    if "://" not in out:
        return out.endswith(".gz")
    url = split_url(out)
    path = url.path.split("?", 1)[0] if url.scheme in HTTP_SCHEMES else url.path
    return path.endswith(".gz")
