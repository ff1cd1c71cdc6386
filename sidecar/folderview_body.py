"""The next epoch's manifest body, kept sorted and joined ahead: the cut writes it, nothing more.

Why: a manifest is a header and one line per entry sorted by path (the FUSE view's format,
:mod:`epochfs.torchclient.layout`), about 66 bytes a line. At a million entries, keeping the lines
in one sorted list made each cut join 66 MB in Python (and sort the list again after it), and
every step that added more than a few samples sorted the whole list again: most of the trainer's
wait at the boundary. Here the lines live in *pages* of up to :data:`PAGE` * 2 sorted
lines, each page's bytes joined once and joined again only when a line enters or leaves it. A new
sample costs a bisect and an insert into one page; the publisher joins the pages that changed at
the end of each step that finished its linking (:meth:`ManifestBody.chunks`), so at the cut the
pages' bytes are ready (but those changed since that step) and the manifest is the header plus a
write of those pages, which the kernel copies into the page cache.

The body cannot be kept in a file ahead: new samples land anywhere in path order, and the header
(counts, the listing's progress at the cut) is only known at the cut and comes first.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

PAGE = 2048
"""Lines a page is split into after a bulk load; a page splits in two past twice this."""


class ManifestBody:
    """Unique manifest lines in sorted order, in pages whose joined bytes are kept."""

    def __init__(self) -> None:
        self._pages: list[list[bytes]] = []
        self._firsts: list[bytes] = []  # each page's first line, for the bisect
        self._joined: list[bytes | None] = []  # None: joined again at the next chunks()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def lines(self) -> list[bytes]:
        """Every line, sorted (tests; a whole copy)."""
        return [line for page in self._pages for line in page]

    def add(self, lines: Iterable[bytes]) -> None:
        """Insert lines that are not in the body. Many at once (a start, a tree built again) are
        merged into new pages; a few go into their pages one by one."""
        new = sorted(lines)
        if not new:
            return
        if len(new) * 16 > self._count:  # a sort of two sorted runs (a merge, in C) beats inserts
            whole = self.lines()
            whole += new
            whole.sort()
            self._load(whole)
            return
        for line in new:
            k = max(0, bisect.bisect_right(self._firsts, line) - 1)
            page = self._pages[k]
            bisect.insort(page, line)
            self._firsts[k] = page[0]
            self._joined[k] = None
            if len(page) > 2 * PAGE:
                half = len(page) // 2
                self._pages[k:k + 1] = [page[:half], page[half:]]
                self._firsts[k:k + 1] = [page[0], page[half]]
                self._joined[k:k + 1] = [None, None]
        self._count += len(new)

    def remove(self, lines: Iterable[bytes]) -> None:
        """Take out lines that are in the body (KeyError for one that is not: a bug)."""
        for line in lines:
            k = bisect.bisect_right(self._firsts, line) - 1
            page = self._pages[k] if k >= 0 else []
            j = bisect.bisect_left(page, line)
            if j == len(page) or page[j] != line:
                raise KeyError(line)
            del page[j]
            self._count -= 1
            if page:
                self._firsts[k] = page[0]
                self._joined[k] = None
            else:
                del self._pages[k], self._firsts[k], self._joined[k]

    def chunks(self) -> list[bytes]:
        """The body as bytes, page by page (only pages changed since the last call are joined)."""
        out = []
        for k, page in enumerate(self._pages):
            joined = self._joined[k]
            if joined is None:
                joined = self._joined[k] = b"".join(page)
            out.append(joined)
        return out

    def _load(self, lines: list[bytes]) -> None:
        self._pages = [lines[i:i + PAGE] for i in range(0, len(lines), PAGE)]
        self._firsts = [page[0] for page in self._pages]
        self._joined = [None] * len(self._pages)
        self._count = len(lines)
