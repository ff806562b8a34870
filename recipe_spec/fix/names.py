"""The name to write for a misspelt one, and whether writing it is safe.

A rename is safe when it fixes a typo: exactly one known name is at most two edits away
(insert, delete, replace or swap two neighbours; or it differs only in case), and no other
misspelt key of the same mapping would become it. Otherwise the closest name by difflib's
ratio (as the findings' "did you mean" hints choose it) is offered as an unsafe fix:
``init_sparsity`` is close to ``sparsity`` but five edits from it, another argument rather
than a typo.

>>> choose(["final_sparsty"], ["final_sparsity", "init_sparsity", "params"])
{'final_sparsty': ('final_sparsity', True)}
>>> choose(["init_sparsity", "final_sparsity"], ["sparsity", "mask_structure"])
{'init_sparsity': ('sparsity', False), 'final_sparsity': ('sparsity', False)}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..text.similar import close_matches

__all__ = ["choose", "edit_distance", "MAX_TYPO_EDITS"]

#: The most edits a safe typo fix may undo.
MAX_TYPO_EDITS = 2


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance (Damerau-Levenshtein with adjacent swaps).

    >>> edit_distance("sheme", "scheme"), edit_distance("percdmap", "percdamp")
    (1, 1)
    """
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[len(b)]


def _one(word: str, candidates: Sequence[str]) -> tuple[str, bool] | None:
    same = [c for c in candidates if c.lower() == word.lower()]
    if len(same) == 1:
        return same[0], True
    typos = [c for c in candidates if edit_distance(word.lower(), c.lower()) <= MAX_TYPO_EDITS]
    if len(typos) == 1:
        return typos[0], True
    close = close_matches(word, candidates, n=1, cutoff=0.6)
    return (close[0], False) if close else None


def choose(unknown: Iterable[str], candidates: Sequence[str]) -> dict[str, tuple[str, bool]]:
    """For each unknown key that has a close candidate: ``(name to write, safe)``."""
    found = {w: hit for w in unknown if (hit := _one(w, candidates)) is not None}
    taken = Counter(new for new, _ in found.values())
    return {w: (new, safe and taken[new] == 1) for w, (new, safe) in found.items()}
