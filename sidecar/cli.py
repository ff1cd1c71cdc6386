"""The ``epochfs`` command line: one sub-command per job, each a thin wrapper over a module.

Here: the parser, ``main`` and the commands that start a process (sample, mount, publish, sidecar,
webhook) or undo one (unmount). The commands on a cache folder are :mod:`.cli_cache`, ``epochfs
index`` is :mod:`.cli_index` and ``epochfs bench`` :mod:`.cli_bench`; the parser's parts that are
no command (the options of every command, ``--version``, the commands' parser class) are
:mod:`.cli_parsing`.

Heavy modules (fsspec, mfusepy, prometheus) are imported inside the handlers so that ``epochfs
status`` stays fast and works where only the cache folder is present.

``--log-level`` (or ``EPOCHFS_LOG_LEVEL``) goes before or after the command. Output cut short by
a reader that stopped reading (``epochfs status | head``) ends the command quietly with status 141,
as a tool killed by SIGPIPE would, not with a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import cast

from epochfs.fuse.errors import MountError
from epochfs.sidecar import cli_bench, cli_cache, cli_index, config, redact, volumes
from epochfs.sidecar.cli_parsing import CommandParser, VersionAction, arg_type, common_options
from epochfs.sidecar.confparse import (
    _non_negative_float,
    _port,
    _positive_float,
    join_negative_values,
)
from epochfs.sidecar.confplaces import _endpoint_url
from epochfs.sidecar.logsettings import LOG_FORMAT, resolve_log_level
from epochfs.sidecar.remote.registry import HELP as REMOTE_HELP
from epochfs.sidecar.signals import STOP_SIGNALS
from epochfs.sidecar.store import NoRoom, StoreError
from epochfs.sidecar.store.index import BUSY_MS, is_busy
from epochfs.sidecar.store.placement import over_cache

log = logging.getLogger("epochfs")


def _cmd_sample(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.SamplerSettings, ns)
    volumes.check_apart_from_remote(settings.remote, cache=settings.cache)
    volumes.check_cache(settings.cache, create=True)
    from epochfs.sidecar.sampler import run_sample

    return run_sample(settings)


def _cmd_mount(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.MountSettings, ns)
    # An epochfs cache must be there: a missing or empty folder would be served as an empty view
    # for ever. The sidecar makes its cache (and index) before it starts this command as its child.
    volumes.check_cache(settings.cache, create=False)
    from epochfs.fuse.server import run_mount

    return run_mount(cache=settings.cache, mount=settings.mount, link_root=settings.link_root,
                     warm_files=settings.warm_files, fuse_api=settings.fuse_api)


def _cmd_publish(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.PublishSettings, ns)
    # made by the publisher, before it writes; never at, over or inside the cache: a view published
    # into its tmp/ made every later sampler start crash (as the sidecar's folder view refuses it)
    volumes.check_view_folder(settings.mount, create=False, cache=settings.cache)
    volumes.check_cache(settings.cache, create=False)
    from epochfs.sidecar.folderview import run_publish

    return run_publish(cache=settings.cache, folder=settings.mount, link_root=settings.link_root)


def _refuse_view_over_cache(settings: config.SidecarSettings) -> None:
    """A view's ``--mount`` at, over or inside the cache, refused (exit 2) before the cache is made
    in it, which would leave it behind and make the folder look "not empty" to the supervisor's
    own check (and to the corrected command's). The FUSE view in the words of its supervisor's
    later check (:func:`~epochfs.fuse.mounting.check_mount_apart`: the objects folder and the link
    root too); imported here, for that view only."""
    if settings.view == "folder":
        refused = over_cache(settings.mount, settings.cache)
        if refused is not None:
            raise config.ConfigError(refused)
        return
    from epochfs.fuse.mounting import check_mount_apart

    check_mount_apart(settings.mount.absolute(), settings.cache.absolute(), settings.link_root)


def _termination_log(ns: argparse.Namespace) -> Path | None:
    """``--termination-log`` as given (flag, else its variable, else the default), read apart
    from the other settings: a refusal of any of them is written there too."""
    given = getattr(ns, "termination_log", None)
    if given is None:
        given = os.environ.get(config.env_name("--termination-log"), "/dev/termination-log")
    return Path(given.strip()) if given.strip() else None


def _cmd_sidecar(ns: argparse.Namespace) -> int:
    """The sidecar's own refusals (a flag, the cache) are written to the termination log as well
    as printed, as its children's are: in a pod, ``kubectl describe`` then shows the reason."""
    try:
        settings = config.from_args(config.SidecarSettings, ns)
        _refuse_view_over_cache(settings)  # before the cache is made, perhaps in --mount: the
        # view's other checks come with the supervisor's
        volumes.check_apart_from_remote(settings.remote, cache=settings.cache, mount=settings.mount)
        volumes.check_cache(settings.cache, create=True)
    except (config.ConfigError, MountError, StoreError) as e:
        log_path = _termination_log(ns)
        if log_path is not None:
            from epochfs.sidecar.supervisor.core import write_termination_message

            said = f"--cache: {e}" if isinstance(e, StoreError) else str(e)
            write_termination_message(log_path, redact.redact(f"epochfs sidecar: {said}"))
        raise
    from epochfs.sidecar.supervisor import run_sidecar

    return run_sidecar(settings)


def _cmd_unmount(ns: argparse.Namespace) -> int:
    from epochfs.fuse.mounting import unmount_stale

    return unmount_stale(cli_cache.path_flag("--mount", ns.mount))


def _cmd_index(ns: argparse.Namespace) -> int:
    """``--endpoint-url`` (its default is ``EPOCHFS_ENDPOINT_URL``) checked as the sampler's is,
    then the listing."""
    if ns.endpoint_url is not None:
        env = config.env_name("--endpoint-url")
        source = ("--endpoint-url" if os.environ.get(env) != ns.endpoint_url
                  else f"--endpoint-url (from {env})")
        try:
            ns.endpoint_url = _endpoint_url(ns.endpoint_url)
        except ValueError as e:
            raise config.ConfigError(f"{source}: {e}") from None
    return cli_index.cmd_index(ns)


def _cmd_webhook(ns: argparse.Namespace) -> int:
    import ssl

    from epochfs.sidecar.webhook.profiles import ProfileError
    from epochfs.sidecar.webhook.server import run_webhook

    try:
        return run_webhook(profiles_dir=cli_cache.path_flag("--profiles", ns.profiles),
                           cert=cli_cache.path_flag("--tls-cert", ns.tls_cert),
                           key=cli_cache.path_flag("--tls-key", ns.tls_key),
                           host=ns.host, port=ns.port, metrics_port=ns.metrics_port)
    except (ProfileError, OSError, ssl.SSLError) as e:
        raise config.ConfigError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="epochfs",
        description="Train on a growing local sample of a remote dataset, served as epoch-N/ folders.",
        parents=[common],
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    # Typed as plain parsers: each takes the common options' parser as a parent.
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]", parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser))

    p = sub.add_parser("sample", parents=[common], help="run the sampler alone (no mount) until interrupted")
    config.add_arguments(p, config.SamplerSettings)
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser(
        "mount", parents=[common],
        help="serve the read-only epoch view of a cache (FUSE server alone)",
    )
    config.add_arguments(p, config.MountSettings)
    p.set_defaults(func=_cmd_mount)

    p = sub.add_parser(
        "publish", parents=[common],
        help="write the epoch view of a cache into a folder as plain files (folder publisher alone)",
    )
    config.add_arguments(p, config.PublishSettings)
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser(
        "sidecar", parents=[common],
        help="sampler + the view (FUSE or folder) + health/metrics: the Kubernetes sidecar",
    )
    config.add_arguments(p, config.SidecarSettings)
    p.set_defaults(func=_cmd_sidecar)

    p = sub.add_parser("unmount", parents=[common], help="unmount a (possibly stale) epochfs mount, and the "
                       "read-only bind <cache>/objects-ro when no other view of its cache is mounted")
    p.add_argument("--mount", required=True, help="mount point")
    p.set_defaults(func=_cmd_unmount)

    p = sub.add_parser("cut", parents=[common], help="cut an epoch now and print its number")
    config.add_arguments(p, config.CacheSettings)
    p.add_argument("--epoch", type=int, default=None, help="epoch number (default: newest + 1)")
    p.add_argument("--force", action="store_true",
                   help="cut what is there, even below --min-samples or with the schedule window incomplete")
    p.add_argument("--far", action="store_true",
                   help="allow --epoch more than 1,000 above the next epoch (refused otherwise: most often "
                        "a step count passed as the epoch); never above 536,870,910")
    p.set_defaults(func=cli_cache.cmd_cut)

    p = sub.add_parser("relist", parents=[common],
                       help="ask the running sampler of a cache to list the remote again (new and "
                            "deleted keys), in the background")
    config.add_arguments(p, config.CacheSettings)
    p.set_defaults(func=cli_cache.cmd_relist)

    p = sub.add_parser("index", parents=[common],
                       help="list a remote once, in parallel, into an index file that sidecars read "
                            "with --index instead of listing (one listing for a fleet)")
    p.add_argument("remote", metavar="REMOTE", help=f"dataset URL: {REMOTE_HELP}")
    p.add_argument("--out", required=True,
                   help="where the index goes: a path or any fsspec URL, or s3://bucket/key; gzip'd "
                        "when the name ends in .gz, plain JSON lines otherwise")
    p.add_argument("--endpoint-url", default=os.environ.get("EPOCHFS_ENDPOINT_URL"),
                   help="S3-compatible endpoint, an http(s) URL such as http://minio:9000 "
                        "(env EPOCHFS_ENDPOINT_URL; AWS_* credentials honoured)")
    p.add_argument("--list-threads", default="8", help="listers working at once (default 8)")
    p.add_argument("--order", choices=("shuffled", "sorted"), default="shuffled",
                   help="the records' order: shuffled (default; every part of the index a sidecar "
                        "has read is a uniform sample of the dataset, so its first epochs are fair) "
                        "or sorted (key order: the first epochs are the first folders)")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser(
        "verify", parents=[common],
        help="check every cached object against the digest (CRC or md5) recorded at admission; "
             "quarantine damaged ones (exit status 1 when any)",
    )
    config.add_arguments(p, config.CacheSettings)
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.add_argument("--report-only", action="store_true",
                   help="change nothing: report damaged objects without quarantining them")
    p.add_argument("--progress-seconds", type=arg_type(_non_negative_float), default=5.0,
                   help="seconds between progress lines on stderr (0: none)")
    p.set_defaults(func=cli_cache.cmd_verify)

    p = sub.add_parser("status", parents=[common], help="occupancy, epochs and rates of a cache or mount")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--cache", help="cache directory")
    where.add_argument("--mount", help="mount point of a running sidecar")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", action="store_true", help="refresh in place until interrupted")
    p.add_argument("--interval", type=arg_type(_positive_float), default=2.0,
                   help="seconds between refreshes (default 2)")
    p.add_argument("--answer-timeout", type=arg_type(_positive_float), default=10.0, metavar="SECONDS",
                   help="how long a look at --mount may take before the command says the mount does not "
                        "answer (a stopped or hung FUSE server) and exits 2 (default 10)")
    p.set_defaults(func=cli_cache.cmd_status)

    p = sub.add_parser(
        "bench", parents=[common],
        help="run the benchmarks (ratios to baselines measured in the same run)",
    )
    known = cli_bench.installed_benchmarks()
    p.add_argument(
        "names", nargs="*",
        help=f"which: {', '.join(known) if known else 'none installed here'} "
             f"(default: {', '.join(cli_bench.DEFAULT_BENCHMARKS)}); each has its own --help "
             f"(epochfs bench NAME --args --help)",
    )
    p.add_argument("--args", nargs=argparse.REMAINDER, default=[],
                   help="passed to each benchmark (python -m epochfs.benchmarks.NAME ARGS)")
    p.set_defaults(func=cli_bench.cmd_bench)

    p = sub.add_parser(
        "webhook", parents=[common],
        help="the admission webhook that attaches epochfs to labelled pods (the chart's webhook.enabled)",
    )
    p.add_argument("--profiles", required=True,
                   help="folder of the injection documents <profile>.json the chart renders")
    p.add_argument("--tls-cert", required=True, help="PEM certificate (chain) the HTTPS server presents")
    p.add_argument("--tls-key", required=True, help="PEM private key of --tls-cert")
    p.add_argument("--host", default="", help="address to listen on (default: all, IPv6 and IPv4)")
    p.add_argument("--port", type=arg_type(_port), default=8443, help="HTTPS port (default 8443)")
    p.add_argument("--metrics-port", type=arg_type(_port), default=9090,
                   help="plain-HTTP port of /metrics and /healthz (default 9090)")
    p.set_defaults(func=_cmd_webhook)
    return parser


SIGPIPE_STATUS = 128 + 13
"""Exit status when stdout's reader went away: what a shell reports for a tool killed by SIGPIPE."""


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe or socket whose reading end is closed (poll says POLLERR/HUP)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            status = _main(argv)
        except SystemExit:  # --help and usage errors print, then exit
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return status
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # a socket's broken pipe, not ours to hide
        # Later writes (the interpreter's final flush included) go nowhere instead of failing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_STATUS


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt is, so that the same clean-up runs."""


def _terminate_as_interrupt() -> None:
    """SIGTERM (a Job's end, ``kubectl delete``) stops ``epochfs index`` as Ctrl-C does: its
    listers stop and its temporary folder of listed parts (gigabytes for a large bucket) is
    removed, where the default action killed it and left the folder behind."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    ns = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else argv))
    try:
        level = resolve_log_level(getattr(ns, "log_level", None))
    except config.ConfigError as e:
        print(f"epochfs {ns.command}: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, level),
        format=LOG_FORMAT,
        stream=sys.stderr,
    )
    redact.install()
    # A blocked signal stays blocked through exec: a parent's thread that blocked these (a launcher,
    # a test runner's worker) left every command deaf to `kill PID` and Ctrl-C, never stopping
    # cleanly. Their handlers and dispositions (an ignored SIGHUP under nohup) are left as they are.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if ns.command == "index":
        _terminate_as_interrupt()
    try:
        return int(ns.func(ns) or 0)
    except (config.ConfigError, MountError) as e:
        print(redact.redact(f"epochfs {ns.command}: {e}"), file=sys.stderr)
        return 2
    except config.RetryLater as e:
        print(redact.redact(f"epochfs {ns.command}: {e}"), file=sys.stderr)
        return config.EXIT_RETRY
    except StoreError as e:
        print(redact.redact(f"epochfs {ns.command}: --cache: {e}"), file=sys.stderr)
        return config.EXIT_RETRY if isinstance(e, NoRoom) else 2
    except sqlite3.OperationalError as e:
        if not is_busy(e):
            raise
        # Another process held the index's write lock past SQLite's wait (a cut or a verify that
        # is stuck, a sqlite3 shell left in a transaction): nothing is damaged, try again later.
        print(f"epochfs {ns.command}: --cache: the index is busy ({e}: another process has held its "
              f"write lock for {BUSY_MS // 1000} s: a cut or a verify still running, or a sqlite3 shell "
              "left in a transaction); nothing was changed, try again once it is done", file=sys.stderr)
        return config.EXIT_RETRY
    except Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
