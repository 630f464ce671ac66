"""beanstalkd's `Ms` (ms.c): an unordered-on-delete list, for tube lists.

beanstalkd keeps its tube list and each connection's watch list in an array
that appends at the end and deletes by moving the last item into the hole.
`list-tubes` and `list-tubes-watched` print that array, so to be
byte-compatible haqueue keeps the same order, holes and all.
"""

from __future__ import annotations


class SwapRemoveList:
    __slots__ = ("items", "index")

    def __init__(self, items=()) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}
        for item in items:
            self.append(item)

    def __contains__(self, item: str) -> bool:
        return item in self.index

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def append(self, item: str) -> bool:
        if item in self.index:
            return False
        self.index[item] = len(self.items)
        self.items.append(item)
        return True

    def remove(self, item: str) -> bool:
        i = self.index.pop(item, None)
        if i is None:
            return False
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.index[last] = i
        return True
