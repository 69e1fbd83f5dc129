"""What the members browse learned a moment ago, reused for a few seconds (docs/admin-api.md,
"Measured"): a filter's total, and where each page it served began.

Both are kept for `SECONDS` at most and forgotten at once when a member is added, edited or
deleted through this API; a change made elsewhere (the CLI, an import, the site) shows within
`SECONDS`. Each map holds a bounded number of entries, the oldest going first: any client can ask
for any number of filters."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

SECONDS = 5.0
TOTALS = 256
PAGE_STARTS = 4096


class Recent:
    """A map whose entries last `seconds`, holding at most `size` of them."""

    def __init__(self, size: int, seconds: float = SECONDS) -> None:
        self.size, self.seconds = size, seconds
        self._kept: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        kept = self._kept.get(key)
        if kept is None:
            return None
        if time.monotonic() - kept[0] > self.seconds:
            del self._kept[key]
            return None
        return kept[1]

    def put(self, key: Hashable, value: Any) -> None:
        self._kept.pop(key, None)
        self._kept[key] = (time.monotonic(), value)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def clear(self) -> None:
        self._kept.clear()


class MemberReads:
    """The members browse's recent totals (by filter and search) and page starts (by filter,
    search, order, limit and page: the first row's sort key, so that `page=N` is read by keyset)."""

    def __init__(self) -> None:
        self.totals = Recent(TOTALS)
        self.page_starts = Recent(PAGE_STARTS)
        # Bumped by every change: a read begun before it does not keep what it learned.
        self.generation = 0

    def forget(self) -> None:
        """A member changed through this API: nothing learned before is used again."""
        self.generation += 1
        self.totals.clear()
        self.page_starts.clear()
