"""The ``epochfs`` command line: one sub-command per job, each a thin wrapper over a module.

Heavy modules (fsspec, mfusepy, prometheus) are imported inside the handlers so that ``epochfs
status`` stays fast and works where only the cache folder is present.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from epochfs.fuse.errors import MountError
from epochfs.sidecar import config
from epochfs.sidecar.store import Store, StoreError

log = logging.getLogger("epochfs")


def _cmd_sample(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.SamplerSettings, ns)
    from epochfs.sidecar.sampler import run_sample

    return run_sample(settings)


def _cmd_mount(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.MountSettings, ns)
    from epochfs.fuse.server import run_mount

    return run_mount(cache=settings.cache, mount=settings.mount, link_root=settings.link_root)


def _cmd_sidecar(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.SidecarSettings, ns)
    from epochfs.sidecar.supervisor import run_sidecar

    return run_sidecar(settings)


def _cmd_unmount(ns: argparse.Namespace) -> int:
    from epochfs.fuse.mounting import unmount_stale

    return unmount_stale(Path(ns.mount))


def _cmd_cut(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.CacheSettings, ns)
    with Store(settings.cache) as store:
        try:
            n = store.cut(ns.epoch, force=ns.force)
        except ValueError as e:
            raise config.ConfigError(f"--epoch: {e}") from None
        if n is None:
            stats = store.stats()
            print(
                f"epochfs: cannot cut yet: {stats.samples} sample(s) complete, "
                f"condition not met (use --force to cut what is there)",
                file=sys.stderr,
            )
            return 1
        print(n)
    return 0


def _cmd_status(ns: argparse.Namespace) -> int:
    from epochfs.sidecar.status import run_status

    return run_status(
        cache=Path(ns.cache) if ns.cache else None,
        mount=Path(ns.mount) if ns.mount else None,
        as_json=ns.json,
        watch=ns.watch,
        interval=ns.interval,
    )


BENCHMARKS = ("fetch", "mount", "loader")


def _cmd_bench(ns: argparse.Namespace) -> int:
    """Run benchmarks/<name>.py of the source checkout this package was installed from."""
    import subprocess

    bench_dir = Path(__file__).resolve().parent.parent / "benchmarks"
    if not bench_dir.is_dir():
        raise config.ConfigError(
            f"needs the benchmarks/ folder of an epochfs source checkout (looked in {bench_dir})"
        )
    status = 0
    for name in ns.names or BENCHMARKS:
        script = bench_dir / f"{name}.py"
        if not script.is_file():
            raise config.ConfigError(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
        print(f"== epochfs bench {name}", flush=True)
        status = max(status, subprocess.run([sys.executable, str(script), *ns.args]).returncode)
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochfs",
        description="Train on a growing local sample of a remote dataset, served as epoch-N/ folders.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("sample", help="run the sampler alone (no mount) until interrupted")
    config.add_arguments(p, config.SamplerSettings)
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("mount", help="serve the read-only epoch view of a cache (FUSE server alone)")
    config.add_arguments(p, config.MountSettings)
    p.set_defaults(func=_cmd_mount)

    p = sub.add_parser("sidecar", help="sampler + FUSE view + health/metrics: the Kubernetes sidecar")
    config.add_arguments(p, config.SidecarSettings)
    p.set_defaults(func=_cmd_sidecar)

    p = sub.add_parser("unmount", help="unmount a (possibly stale) epochfs mount")
    p.add_argument("--mount", required=True, help="mount point")
    p.set_defaults(func=_cmd_unmount)

    p = sub.add_parser("cut", help="cut an epoch now and print its number")
    config.add_arguments(p, config.CacheSettings)
    p.add_argument("--epoch", type=int, default=None, help="epoch number (default: newest + 1)")
    p.add_argument("--force", action="store_true",
                   help="cut what is there, even below --min-samples or with the schedule window incomplete")
    p.set_defaults(func=_cmd_cut)

    p = sub.add_parser("status", help="occupancy, epochs and rates of a cache or mount")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--cache", help="cache directory")
    where.add_argument("--mount", help="mount point of a running sidecar")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", action="store_true", help="refresh in place until interrupted")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("bench", help="run the benchmarks (ratios to baselines measured in the same run)")
    p.add_argument("names", nargs="*", help=f"which: {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--args", nargs=argparse.REMAINDER, default=[], help="passed to each benchmark script")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(ns.log_level).upper(), logging.INFO),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(ns.func(ns) or 0)
    except (config.ConfigError, MountError) as e:
        print(f"epochfs {ns.command}: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"epochfs {ns.command}: --cache: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
