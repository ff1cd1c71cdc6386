"""Waiting for an epoch: look ``epoch-N/`` up, ask the sidecar for its cut, say what is missing.

Apart from :mod:`.dataset` because it is the part of opening an epoch that knows the sidecar (the
cut request, its answers, the mount being replaced) and not torch: :class:`.EpochDataset` calls
:func:`wait_for_epoch` before it lists the epoch, and a caller may call it alone. Torch-free.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from .cutask import URL_GIVEN, CutAnswer, CutAsker
from .describe import FirstEpochPace, check_root, describe_root
from .layout import MAX_EPOCH, epoch_exists

Progress = Callable[[str], None]


def print_progress(line: str) -> None:
    """Default progress sink: one line on stderr, where a training log shows it."""
    print(line, file=sys.stderr, flush=True)


def check_epoch(epoch: object) -> int:
    """``epoch`` if it is an epoch number, else a ValueError that says what one is (before any wait)."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch must be an int from 0 to {MAX_EPOCH:,} (the largest epoch number), "
                         f"got {epoch!r}")
    return epoch


def check_timeout(timeout: object) -> float:
    """``timeout`` as seconds if it is a positive number, else a ValueError (before any wait)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 \
            or math.isnan(timeout):
        raise ValueError("timeout must be a positive number of seconds (math.inf to wait forever), "
                         f"got {timeout!r}")
    return float(timeout)


def check_progress(progress: object) -> None:
    """A ValueError unless ``progress`` is a callable of one line or None (before any wait): a
    wrong value would otherwise fail only at the first waiting line, minutes into a wait."""
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a callable taking one line, or None (quiet), got {progress!r}")


def check_progress_every(seconds: object) -> float:
    """``progress_every`` as seconds if it is a positive number (``math.inf``: the first line only),
    else a ValueError: 0 would write a waiting line at every lookup, 50 a second."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"progress_every must be a positive number of seconds (math.inf: the first line "
                         f"only), got {seconds!r}")
    return float(seconds)


def check_sidecar_url(url: object) -> None:
    """A ValueError unless ``url`` (a ``sidecar_url`` given) is an http(s) URL with a host, or
    None: another value would send each cut request nowhere and only say so in a waiting line."""
    if url is None:
        return
    parts = urlparse(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("sidecar_url must be the sidecar's http(s) URL (http://127.0.0.1:8080) or None "
                         f"(no cut requests), got {url!r}")


class _FromEnv:
    """The default of ``sidecar_url``: ``EPOCHFS_REPORT_URL``'s scheme and host."""


FROM_ENV = _FromEnv()
ASK_EVERY = 1.0
"""Seconds between cut requests while an epoch is missing (the sidecar queues the next epoch; asking
again covers a sidecar restart and a jump, which is never queued)."""
PUBLISH_GRACE = 5.0
"""How long ``wait=False`` still looks for an epoch the sidecar just said is live (the folder view
publishes it within about 0.1 s)."""


def wait_for_epoch(root: str | os.PathLike[str], epoch: int, *, wait: bool = True, timeout: float = 600.0,
                   progress: Progress | None = print_progress, progress_every: float = 5.0,
                   jump: bool = False, sidecar_url: str | _FromEnv | None = FROM_ENV) -> float:
    """Look up ``root/epoch-N`` (on the mount, the lookup asks for the cut) until it exists.

    While it is missing, the sidecar at ``sidecar_url`` (default: from ``EPOCHFS_REPORT_URL``, else
    the ``report_url`` of ``root``'s status.json, else port 8080; None: never) is also asked for
    the cut (``POST /v1/cut``, :mod:`.cutask`), once a second: on the folder view (``--view
    folder``) that request is what a lookup is on the FUSE view. ``jump=True`` lets the cut skip
    numbers (a resumed trainer starting above the newest epoch + 1); otherwise only the next epoch
    is cut, as for a lookup.

    Returns the seconds spent waiting. The first miss reports at once (so a user sees why training
    has not started), then every ``progress_every`` seconds; lookups back off from 20 ms to 0.5 s.
    Raises ValueError for a malformed ``EPOCHFS_REPORT_URL`` (read when ``sidecar_url`` is the
    default) or argument, before any lookup; FileNotFoundError for a missing root, one that is certainly not
    the mount (the folder above the view, an epoch folder, the sidecar's ``--cache`` folder, a
    folder with files that is no mount point: :func:`.describe.not_the_mount`), a missing epoch
    with ``wait=False``, or one the sidecar says can never be cut (retired, or below the newest and
    never cut), and TimeoutError after ``timeout``; each names the epoch and says what is present.
    """
    epoch = check_epoch(epoch)
    timeout = check_timeout(timeout)
    check_progress(progress)
    progress_every = check_progress_every(progress_every)
    if not isinstance(sidecar_url, _FromEnv):
        check_sidecar_url(sidecar_url)
    root = Path(root)
    asker = _asker(sidecar_url, root)
    start = time.monotonic()
    if epoch_exists(root, epoch):
        return 0.0
    check_root(root, present=_root_present(root))
    answer = asker.ask(epoch, jump=jump) if asker else None
    _check_answer(answer, root, epoch)
    if not wait:
        if answer is not None and answer.state == "live":
            return _wait_published(root, epoch, start)
        advice = "" if _waiting_cannot_cut(answer) else "; pass wait=True to wait for its cut"
        raise FileNotFoundError(f"epoch {epoch} is not under {root} ({describe_root(root)})"
                                f"{_sidecar_says(answer, jump)}{_trouble(asker)}{advice}")
    delay = 0.02
    next_report = start
    next_ask = start + ASK_EVERY
    pace = FirstEpochPace()
    while True:
        now = time.monotonic()
        if now >= next_report:
            check_root(root, present=True)  # the view may appear below a wrong root after the wait began
            if progress is not None:
                progress(f"epochfs: waiting for epoch {epoch} under {root} ({now - start:.0f}s so far; "
                         f"{describe_root(root, pace)}){_sidecar_says(answer, jump)}{_trouble(asker)}")
            next_report = now + progress_every
        remaining = timeout - (now - start)
        if remaining <= 0:
            raise TimeoutError(f"epoch {epoch} did not appear under {root} within {timeout:g}s "
                               f"({describe_root(root)}){_sidecar_says(answer, jump)}{_trouble(asker)}")
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.5)
        if epoch_exists(root, epoch):
            return time.monotonic() - start
        if asker and time.monotonic() >= next_ask:
            answer = asker.ask(epoch, jump=jump) or answer
            _check_answer(answer, root, epoch)
            next_ask = time.monotonic() + ASK_EVERY


def _asker(sidecar_url: str | _FromEnv | None, root: Path) -> CutAsker | None:
    """Who asks for cuts: the sidecar ``sidecar_url`` names, or ``EPOCHFS_REPORT_URL``'s (read now,
    so a malformed value is a ValueError before any lookup), else the one ``root``'s status.json
    names, else port 8080's; None when cut requests are off."""
    if isinstance(sidecar_url, _FromEnv):
        return CutAsker.for_mount(root)
    return CutAsker(sidecar_url, source=URL_GIVEN) if sidecar_url else None


def _trouble(asker: CutAsker | None) -> str:
    """Why the last cut request got no answer, and the remedy ('' when it got one or none was sent)."""
    return asker.trouble() if asker else ""


def _waiting_cannot_cut(answer: CutAnswer | None) -> bool:
    """The sidecar refused the cut (an epoch past the next one without ``jump``, or one another cut
    has passed): no wait asks for it, so advising ``wait=True`` would send the caller into a wait
    that ends in a TimeoutError."""
    return answer is not None and answer.state == "refused"


def _sidecar_says(answer: CutAnswer | None, jump: bool) -> str:
    """``; the sidecar says: <its reason>`` for an epoch it has not made live ('' when no sidecar
    answered, or it said live), plus the client's remedy where one exists.

    Why: the refusal is in hand when the wait gives up; without it a TimeoutError or a
    ``wait=False`` error named only the folder, and the one remedy (``jump=True``) was lost. The
    sidecar's own words say ``jump=1`` (its HTTP parameter); this client's is ``jump=True``."""
    if answer is None or answer.state == "live":
        return ""
    said = f"; the sidecar says: {answer.message}"
    if answer.state == "refused" and not jump and not answer.final:
        said += "; from this client: pass jump=True (waiting alone never asks for this cut)"
    return said


def _check_answer(answer: CutAnswer | None, root: Path, epoch: int) -> None:
    if answer is not None and answer.final and not epoch_exists(root, epoch):
        raise FileNotFoundError(f"epoch {epoch} will not appear under {root}: the sidecar says "
                                f"{answer.message} ({describe_root(root)})")


def _wait_published(root: Path, epoch: int, start: float) -> float:
    """The sidecar cut it: the folder view shows it within about 0.1 s."""
    delay = 0.01
    while time.monotonic() - start < PUBLISH_GRACE:
        if epoch_exists(root, epoch):
            return time.monotonic() - start
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    raise FileNotFoundError(f"epoch {epoch} was cut but did not appear under {root} within "
                            f"{PUBLISH_GRACE:g}s ({describe_root(root)})")


def _root_present(root: Path) -> bool:
    """A folder, or a mount being replaced (a dead FUSE mount answers ENOTCONN): wait for it then."""
    try:
        return stat.S_ISDIR(os.stat(root).st_mode)
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
