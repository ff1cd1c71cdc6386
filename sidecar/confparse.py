"""The value parsers of the settings (sizes, counts, fractions, ports, switches...) and the field
declaration helper: each parser raises ValueError saying what is wrong, which
:mod:`epochfs.sidecar.config` turns into a :class:`~epochfs.sidecar.config.ConfigError` naming the
flag (exit status 2). Kept apart so that config.py holds only the settings themselves; the parsers
of places (remote, index, endpoint, paths) are in :mod:`epochfs.sidecar.confplaces`.
An empty or blank value of a setting whose default is none means that default (``_optional_*``).
"""

from __future__ import annotations

import difflib
import errno
import logging
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import field
from typing import Any

from epochfs.sidecar.store import Schedule

log = logging.getLogger("epochfs.config")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "p": 1000**5,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
    "pi": 1024**5,
}
_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([kmgtp]?i?)b?", re.IGNORECASE)
"""A number (``4096``, ``1.5``, ``.5``) and a unit, matched whole against the stripped text. Each
digit and each space belongs to one place in the pattern, so a long run of either is matched or
refused in one pass (two runs of the same class side by side would try every split of it:
quadratic, seconds for a few thousand digits)."""


MAX_SIZE = float(2**63)
"""Sizes at or above this many bytes are refused (SQLite and the kernel count in signed 64 bits)."""


def _size_bytes(text: str) -> float:
    """The bytes ``text`` says, before they are rounded down to a whole number: a rate's parser
    must tell ``0.5`` (which would round to 0, the feature off) from ``0``."""
    m = _SIZE_RE.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 500Mi, 20Gi, 1.5T, 4096)")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown unit in {text!r}")
    size = number * _UNITS[unit]
    if not size < MAX_SIZE:  # a float of hundreds of digits is inf: no int, a traceback before
        raise ValueError(f"{text.strip()!r} is too large (at most {MAX_SIZE:.0e} bytes)")
    return size


def parse_size(text: str) -> int:
    """Parse ``500Mi``, ``20Gi``, ``1.5T``, ``4096`` into bytes (binary and decimal units)."""
    return int(_size_bytes(text))


def spelled_size(n: int) -> str:
    """``n`` bytes as a user types them, in the largest binary unit that holds it whole
    (``10737418240`` -> ``10Gi``, ``8388608`` -> ``8Mi``, ``1000`` -> ``1000``): what ``--help``
    shows as a size's default, which :func:`parse_size` reads back to ``n``."""
    for unit in ("pi", "ti", "gi", "mi", "ki"):
        if n and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit.capitalize()}"
    return str(n)


def format_size(n: float) -> str:
    """Human size with binary units, for status lines."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _opt(
    flag: str,
    doc: str,
    *,
    default: Any = None,
    parse: Callable[[str], Any] = str,
    required: bool = False,
) -> Any:
    return field(
        default=default,
        metadata={"flag": flag, "doc": doc, "parse": parse, "required": required},
    )


def _integer(text: str) -> int:
    """A whole number, refused in words (``int()``'s own "invalid literal for int() with base 10"
    names neither the kind wanted nor, for ``1.5``, why)."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"must be a whole number, got {str(text).strip()!r}") from None


def _positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _finite(text: str) -> float:
    """A float that is a number: NaN compares false with everything (a NaN interval made every
    check "not yet due" or "due", as each comparison fell) and inf overflows the clock and socket
    calls it reaches (``settimeout(inf)`` fails as "timestamp out of range")."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {str(text).strip()!r}") from None
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _non_negative_float(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _fraction(text: str) -> float:
    """A share in [0, 1) (``--headroom 0.25``); a percentage is refused with the form to write."""
    percent = str(text).strip()
    if percent.endswith("%"):
        try:
            share = f"{float(percent[:-1]) / 100:g}"
        except ValueError:
            share = "0.25 for 25%"
        raise ValueError(f"a fraction in [0, 1), not a percentage: write {share}")
    value = _finite(text)
    if not 0.0 <= value < 1.0:
        raise ValueError("must be in [0, 1)")
    return value


def _positive_float(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _bounded(parse: Callable[[str], Any], most: float, why: str) -> Callable[[str], Any]:
    """``parse``, then at most ``most`` (``why``: the reason, in the error)."""

    def bounded(text: str) -> Any:
        value = parse(text)
        if value > most:
            raise ValueError(f"must be at most {most:g} ({why})")
        return value

    return bounded


def _switch(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be 1/0, true/false, yes/no or on/off, got {text!r}")


def _port(text: str) -> int:
    """A TCP port, 0 for any the system picks (:func:`bind_failure` offers it). Refused in words:
    ``int()``'s own message ("invalid literal for int() with base 10: ''") named no port."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"must be a TCP port (0-65535), got {str(text).strip()!r}") from None
    if not 0 <= value <= 65535:
        raise ValueError(f"must be a TCP port (0-65535), got {value}")
    return value


def _optional_port(text: str) -> int | None:
    """A port whose default is none (``--metrics-port``: the health port's): empty or blank means
    that default, as for every setting whose default is none (:func:`_optional_size`)."""
    return _port(text) if str(text).strip() else None


def _rate(text: str) -> int:
    """A byte rate such as ``8Mi`` (per second); 0 turns the feature off. A positive rate below
    one byte per second is refused: rounded down to whole bytes it was 0, and ``--scrub-rate 0.5``
    switched the scrub off without a word."""
    if str(text).strip().startswith("-"):
        raise ValueError("must not be negative")
    exact = _size_bytes(text)
    if 0 < exact < 1:
        raise ValueError(f"{str(text).strip()!r} is below 1 byte per second (give 0 to turn it off, "
                         "or at least 1)")
    return int(exact)


def _capacity(text: str) -> int:
    if str(text).strip().startswith("-"):
        raise ValueError("must not be negative")
    exact = _size_bytes(text)
    if 0 < exact < 1:  # "must be positive" said of a positive value, rounded down to 0 bytes
        raise ValueError(f"{str(text).strip()!r} is below 1 byte (sizes count whole bytes)")
    if exact <= 0:
        raise ValueError("must be positive")
    return int(exact)


def _optional_size(text: str) -> int | None:
    """A positive size whose default is none (``--max-rate``, ``--max-object-size``): empty means
    that default, as an empty ``EPOCHFS_INDEX`` or ``EPOCHFS_SCHEDULE`` does; ``EPOCHFS_MAX_RATE=``
    was refused as "not a size: ''" where the help said "default: none"."""
    return _capacity(text) if str(text).strip() else None


SIZE_PARSERS = (_capacity, _rate, _optional_size)
"""The parsers of fields that hold a byte count: ``--help`` shows their defaults as sizes."""


def _schedule(text: str) -> Schedule | None:
    """A schedule, or none (snapshot mode) for an empty or blank value, as for every setting
    whose default is none: a variable filled from a file ends in a newline."""
    return Schedule.parse(text) if str(text).strip() else None


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A parser that takes one of ``choices`` (any case, spaces around ignored)."""
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {text!r}")
        return value
    return parse


VIEWS = ("fuse", "folder")
_view = _one_of(VIEWS)
FUSE_APIS = ("lowlevel", "highlevel")
_fuse_api = _one_of(FUSE_APIS)


OTHER_ENV: dict[str, str] = {
    "EPOCHFS_LOG_LEVEL": "--log-level of every command (sidecar/logsettings.py)",
    "EPOCHFS_REPORT_URL": "the torch client's sidecar URL (torchclient/report.py)",
    "EPOCHFS_TESTING": "set by the test suite for the processes it starts (tests/conftest.py)",
    "EPOCHFS_SOAK_SECONDS": "the soak test's length (make soak)",
    "EPOCHFS_SOAK_SEED": "the soak test's seed",
    "EPOCHFS_SOAK_INDEX_DAMAGE": "the soak test's index damages",
    "EPOCHFS_CRASH_SEED": "the folder view's crash test's seed",
    "EPOCHFS_MODEL_EXAMPLES": "the store model test's examples",
    "EPOCHFS_CONTAINER_TEST": "make container-test",
    "EPOCHFS_CT_CACHE": "the container test's data root",
    "EPOCHFS_CT_SUITE": "the container test's Debian suite (scripts/container-base.sh)",
    "EPOCHFS_CT_MIRROR": "the container test's Debian mirror (scripts/container-base.sh)",
    "EPOCHFS_RUNC": "the real runc of scripts/runc-wrapper",
}
"""The ``EPOCHFS_*`` variables read by something other than a settings field (whose variables
come from the field declarations), with who reads them: with those, the known names
(:func:`epochfs.sidecar.config.known_env_names`)."""


def env_name(flag: str) -> str:
    """``--shard-index`` -> ``EPOCHFS_SHARD_INDEX``."""
    return "EPOCHFS_" + flag.lstrip("-").replace("-", "_").upper()


def unknown_env(environ: Mapping[str, str], known: Collection[str]) -> list[str]:
    """The ``EPOCHFS_*`` names of ``environ`` not in ``known``, sorted."""
    return sorted(n for n in environ if n.startswith("EPOCHFS_") and n not in known)


SERVICE_LINK = re.compile(r"EPOCHFS\w*?_(SERVICE_HOST|SERVICE_PORT\w*|PORT_\d+_(TCP|UDP|SCTP)\w*)"
                          r"|EPOCHFS\w*_PORT=(tcp|udp|sctp)://\S*")
"""Kubernetes' service links of a Service named epochfs*, as ``name`` or ``name=value``: no typos."""


def warn_unknown_env(environ: Mapping[str, str], known: Collection[str]) -> None:
    """One warning line per ``EPOCHFS_*`` variable nothing reads, naming the closest known name:
    a capacity of 1Mi set under a mistyped name (CAPCITY) was ignored without a word and the 10 GiB
    default used. A warning, not a refusal: other tools, or a later epochfs, may set names this one
    does not know (Kubernetes' service links are not even warned of: :data:`SERVICE_LINK`). Called once
    per command, at the start (``config.from_args``); the supervisor's children get those names
    unset (``config.to_env``), so a sidecar says it once."""
    prefix = "EPOCHFS_"  # compared without it: every name shares it, so every name looked close
    tails = sorted(name.removeprefix(prefix) for name in known)
    for name in unknown_env(environ, known):
        if SERVICE_LINK.fullmatch(name) or SERVICE_LINK.fullmatch(f"{name}={environ[name]}"):
            continue
        close = difflib.get_close_matches(name.removeprefix(prefix), tails, n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        log.warning("%s is set but no epochfs setting reads it, so it has no effect%s", name, hint)


def shown_default(default: Any, parse: Callable[[str], Any]) -> str:
    """A default as the user types it, for ``--help``: ``1``/``0`` for a switch (not ``True``),
    a size in its unit (``10Gi``, not ``10737418240``), "" for none."""
    if default is None:
        return ""
    if isinstance(default, bool):
        return "1" if default else "0"
    if parse in SIZE_PARSERS and isinstance(default, int):
        return spelled_size(default)
    return str(default)


def bind_failure(e: OSError) -> str:
    """Why a listening port could not be bound, and what to do, in a few words: the commonest case
    is a second sidecar on a host network with the same default port."""
    if e.errno == errno.EADDRINUSE:
        return "address already in use (another sidecar on this host? choose another port, or 0 for any)"
    if e.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privilege; choose a port from 1024)"
    if e.errno == errno.EADDRNOTAVAIL:
        return "address not available on this host"
    return e.strerror or str(e)


_NEGATIVE = re.compile(r"^-[0-9.]")


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--flag -5Gi`` as ``--flag=-5Gi``: argparse takes a value that starts with ``-`` and is no
    plain number for an option of its own, and answered ``--capacity -5Gi`` with the whole usage
    and "expected one argument" where ``--capacity=-5Gi`` names the flag and says "must not be
    negative". Options after ``--`` are left alone."""
    args, i = list(argv), 0
    out: list[str] = []
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return out + args[i:]
        if (arg.startswith("--") and "=" not in arg and i + 1 < len(args)
                and _NEGATIVE.match(args[i + 1])):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
