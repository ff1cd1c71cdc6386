"""Requests sent ahead of the code that will want their answers.

The sampler sends a new cache's first LIST before it opens its index (``sampler/command.py``,
:meth:`.S3Remote.list_page_ahead`): the round trip overlaps the index's creation and recovery
instead of following it, and the listing takes the answer when it gets there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PageAhead(Generic[T]):
    """Pages asked for ahead of their caller: each one's request runs now, on a daemon thread of
    its own, and the first :meth:`take` of its key gets its answer (or raises its error) once it
    is there. An answer nobody takes is dropped with the thread (a start that failed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: dict[str, _Answer[T]] = {}

    def start(self, key: str, ask: Callable[[], T]) -> None:
        answer: _Answer[T] = _Answer()
        with self._lock:
            self._pages[key] = answer
        threading.Thread(target=answer.run, args=(ask,), name="list-ahead", daemon=True).start()

    def take(self, key: str) -> T | None:
        """The answer asked ahead for ``key`` (waited for), or None where none was."""
        with self._lock:
            answer = self._pages.pop(key, None)
        return None if answer is None else answer.get()


class _Answer(Generic[T]):
    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self, ask: Callable[[], T]) -> None:
        try:
            self._value = ask()
        except BaseException as e:  # the caller's to raise, where it asks for the page
            self._error = e
        finally:
            self._done.set()

    def get(self) -> T:
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


__all__ = ["PageAhead"]
