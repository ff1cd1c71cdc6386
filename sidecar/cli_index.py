"""``epochfs index``: list a remote once, in parallel, into an index file that sidecars read with
``--index``.

Apart from :mod:`.cli` because it is the one command with checks of its own before it runs (a
``--out`` that cannot be written is refused before a listing of minutes, not after it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from epochfs.sidecar import config, redact, volumes


def cmd_index(ns: argparse.Namespace) -> int:
    """List a remote once (in parallel) into an index file that sidecars read with --index."""
    from epochfs.sidecar.confparse import _bounded, _positive_int
    from epochfs.sidecar.confplaces import _remote
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
    ns.out = _checked_out(ns.out, remote=url)
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


def _checked_out(out: str, *, remote: str) -> str:
    """``--out`` checked before the listing (minutes on a large bucket; a mistake was found after
    it, exit 1), and returned as the writer takes it: a ``file://`` URL (its scheme in any case,
    ``file://localhost/p`` being ``/p``, as for a remote) as its local path, another URL with its
    scheme in lower case. Refused (exit 2): an empty one (``Path("")`` is the working folder), a
    scheme no backend and no fsspec protocol serves (the ``--index`` check:
    :func:`~epochfs.sidecar.remote.registry.check_index_url`), a URL under the remote's own
    prefix (:func:`_check_out_of_remote_prefix`), and a local one that cannot be written or that
    is in the remote's own folder (:func:`_check_local_out`)."""
    from epochfs.sidecar.remote.registry import check_index_url
    from epochfs.sidecar.remote.urls import local_root, split_url

    text = out.strip()
    if not text:
        raise config.ConfigError("--out: must not be empty: name the index file (a path such as "
                                 "./index.jsonl.gz, or a URL such as s3://bucket/index.jsonl.gz)")
    scheme = split_url(text).scheme
    if scheme:
        try:
            check_index_url(text)
        except ValueError as e:
            raise config.ConfigError(f"--out: {e}") from None
        if scheme != "file":
            url = scheme + text[len(scheme):]  # S3://b/k is s3://b/k; the writer asks in lower case
            _check_out_of_remote_prefix(url, shown=out, remote=remote)
            return url
        text = local_root(text)
    _check_local_out(text, shown=out, remote=remote)
    return text


def _check_local_out(local: str, *, shown: str, remote: str) -> None:
    """Refuse a local ``--out`` (a path, as ``shown`` on the command line) that cannot be written
    before the listing runs (it ran to its end, minutes on a large bucket, then failed with a
    traceback; and a missing folder was made): a folder, a path under a missing or read-only
    folder; or one inside a ``file://`` remote's folder, whose files are the samples: the index
    would list itself for a data file (the sampler refuses its ``--cache`` there alike,
    :func:`~epochfs.sidecar.volumes.check_apart_from_remote`)."""
    path = Path(local).expanduser()
    _check_apart_from_remote(path, shown=shown, remote=remote)
    if path.is_dir():
        raise config.ConfigError(f"--out {shown}: is a folder; name the index file ({path}/index.jsonl.gz)")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise config.ConfigError(f"--out {shown}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise config.ConfigError(f"--out {shown}: the folder {parent} does not exist")
    import tempfile

    try:  # a file made and removed: as root os.access says yes to /proc and to read-only mounts
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".epochfs-index-probe-"):
            pass
    except OSError as e:
        raise config.ConfigError(f"--out {shown}: cannot write in {parent}: {e.strerror}") from None


def _check_apart_from_remote(path: Path, *, shown: str, remote: str) -> None:
    """Refuse ``path`` inside the folder of the ``file://`` remote ``remote`` (other remotes have
    no folder here), with a place beside that folder to use instead."""
    root = volumes.remote_folder_holding(remote, path)
    if root is not None:
        beside = Path(root).parent / f"{Path(root).name}-{path.name}"
        where = ("give REMOTE a narrower folder than the whole filesystem" if root == "/"
                 else f"write it beside that folder (--out {beside})")
        raise config.ConfigError(f"--out: {shown} is inside the remote's folder {root} (REMOTE {remote}), "
                                 f"whose files are the samples: the index would list itself as one; {where}")


def _check_out_of_remote_prefix(url: str, *, shown: str, remote: str) -> None:
    """Refuse an ``--out`` URL (not ``file://``: :func:`_check_apart_from_remote`) that names an
    object the remote lists: the same scheme and bucket (or host), its key under the remote's
    prefix (``s3://b/data`` lists ``data/...``, not ``data2/...``; a remote without a prefix, the
    whole bucket). Such an index lists itself as a sample when listed again (21 keys for 20
    objects), and every sampler listing the remote catalogs it as one; refused before the listing,
    exit 2, as a ``file://`` remote's folder is."""
    from epochfs.sidecar.remote.urls import split_url

    out_scheme, out_host, out_path = split_url(url)
    scheme, host, path = split_url(remote)
    if (out_scheme, out_host) != (scheme, host):
        return
    prefix = path.strip("/")  # the remote's root, as its backend lists it (s3://b/p/ is p)
    key = out_path.lstrip("/")  # the object's key, as the writer names it
    if prefix and not key.startswith(prefix + "/"):
        return
    name = key.rsplit("/", 1)[-1] or "index.jsonl.gz"
    root = f"{scheme}://{host}" + (f"/{prefix}/" if prefix else "")
    where = (f"write it beside that prefix (--out {scheme}://{host}/{prefix}-{name})" if prefix
             else "give REMOTE a narrower prefix than the whole bucket, or write it to another bucket")
    raise config.ConfigError(f"--out: {shown} is inside the remote's prefix {root} (REMOTE {remote}), "
                             f"whose objects are the samples: the index would list itself as one; {where}")


def _gzipped_name(out: str) -> bool:
    """Whether ``epochfs index --out`` names a gzip file (its path ends in ``.gz``; a URL's query
    is not part of the name; an object store key's '#' and '?' are: :func:`.remote.urls.split_url`)."""
    from epochfs.sidecar.remote.urls import HTTP_SCHEMES, split_url

    if "://" not in out:
        return out.endswith(".gz")
    url = split_url(out)
    path = url.path.split("?", 1)[0] if url.scheme in HTTP_SCHEMES else url.path
    return path.endswith(".gz")
