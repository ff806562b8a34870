"""Closest names, as :func:`difflib.get_close_matches` finds them, fast for long lists.

``difflib.get_close_matches`` computes the similarity ``ratio()`` (a longest-matching-blocks
search) of every candidate that passes a cheap bound, and a model's layer names all pass it:
forty unknown names against a 768-parameter model took seconds. :class:`CloseMatches`
gives the same answers: it computes the bound (``quick_ratio``: twice the characters the two
names share, over their total length) for every candidate at once from per-character counts
made once per candidate list, then ``ratio()`` only in decreasing order of the bound, and
stops when no remaining candidate can enter the best ``n``.

>>> CloseMatches(["apple", "ape", "peach", "puppy"]).get("appel", n=3, cutoff=0.6)
['apple', 'ape']
>>> close_matches("num_epoch", ["num_epochs", "lr"], n=1)
['num_epochs']
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from difflib import SequenceMatcher
from itertools import repeat
from operator import add

__all__ = ["CloseMatches", "close_matches"]


class CloseMatches:
    """One list of candidate names, asked for the closest to many words."""

    def __init__(self, candidates: Iterable[str]):
        self.candidates = list(candidates)
        self._lengths = [len(x) for x in self.candidates]
        self._columns: dict[tuple[str, int], list[int]] = {}  # (char, k) -> min(count, k) per candidate

    def _column(self, char: str, k: int) -> list[int]:
        column = self._columns.get((char, k))
        if column is None:
            counts = self._columns.get((char, 0))
            if counts is None:
                counts = self._columns[(char, 0)] = [x.count(char) for x in self.candidates]
            column = self._columns[(char, k)] = list(map(min, counts, repeat(k)))
        return column

    def get(self, word: str, n: int = 3, cutoff: float = 0.6) -> list[str]:
        """``difflib.get_close_matches(word, candidates, n, cutoff)``."""
        if not n > 0:
            raise ValueError(f"n must be > 0: {n!r}")
        if not 0.0 <= cutoff <= 1.0:
            raise ValueError(f"cutoff must be in [0.0, 1.0]: {cutoff!r}")
        if not self.candidates:
            return []
        shared = [0] * len(self.candidates)
        for char, k in Counter(word).items():
            shared = list(map(add, shared, self._column(char, k)))
        size = len(word)
        bounds = [
            (2.0 * m / (length + size) if length + size else 1.0, x)
            for m, length, x in zip(shared, self._lengths, self.candidates, strict=True)
        ]
        ranked = sorted((b for b in bounds if b[0] >= cutoff), reverse=True)
        matcher = SequenceMatcher()
        matcher.set_seq2(word)
        best: list[tuple[float, str]] = []  # a heap of the best n (ratio, name)
        for bound, x in ranked:
            if len(best) == n and (bound, x) <= best[0]:
                break  # ratio <= bound: no candidate left can enter the best n
            matcher.set_seq1(x)
            ratio = matcher.ratio()
            if ratio >= cutoff:
                if len(best) < n:
                    heapq.heappush(best, (ratio, x))
                elif (ratio, x) > best[0]:
                    heapq.heapreplace(best, (ratio, x))
        return [x for _, x in sorted(best, reverse=True)]


def close_matches(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """``difflib.get_close_matches(word, candidates, n, cutoff)``, the same answer, faster on
    long candidate lists (one word: build a :class:`CloseMatches` to ask several)."""
    return CloseMatches(candidates).get(word, n, cutoff)
