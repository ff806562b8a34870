"""Whether a saved schedule state belongs to the recipe it is restored into.

A state saved by ``state_dict()`` carries the recipe's identity: one entry per modifier (its
type and its arguments as resolved, variables substituted) and a hash of that list.
``load_state_dict()`` refuses a state saved with another recipe, naming the first thing that
changed (a modifier added, removed or replaced, an argument's value), because the saved masks
and counters are keyed by modifier position: restored into another recipe they would attach
to the wrong modifiers. ``allow_recipe_change=True`` continues on purpose, with a warning.

>>> from recipe_spec import loads
>>> a = loads("modifiers:\\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 2}\\n")
>>> b = loads("modifiers:\\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 3}\\n")
>>> recipe_changes(identity(a), b)
['EpochRangeModifier (line 2): end_epoch was 2, now 3']
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..recipe.model import Recipe

__all__ = ["identity", "recipe_hash", "recipe_changes", "check_same_recipe", "RecipeChangedError"]


class RecipeChangedError(ValueError):
    """A saved state belongs to another recipe (the message says what changed)."""


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def identity(recipe: Recipe) -> list[dict[str, Any]]:
    """One entry per modifier: ``type``, ``line`` and the resolved ``args``."""
    return [{"type": m.type, "line": m.span.line, "args": _canonical(dict(m.args))} for m in recipe.modifiers]


def recipe_hash(ids: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of the modifiers' types and arguments (lines do not count: moving a modifier
    down the file, or adding a comment, is not a change)."""
    text = json.dumps([[i["type"], i["args"]] for i in ids], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def recipe_changes(saved: Sequence[Mapping[str, Any]], recipe: Recipe, limit: int = 5) -> list[str]:
    """What differs between the saved identity and ``recipe``, first ``limit`` items."""
    now = identity(recipe)
    out: list[str] = []
    for i in range(max(len(saved), len(now))):
        if i >= len(now):
            out.append(f"{saved[i]['type']} (line {saved[i]['line']} of the saved recipe) was removed")
        elif i >= len(saved):
            out.append(f"{now[i]['type']} (line {now[i]['line']}) was added")
        elif saved[i]["type"] != now[i]["type"]:
            out.append(f"modifier {i + 1} was {saved[i]['type']}, now {now[i]['type']} (line {now[i]['line']})")
        else:
            before, after = saved[i]["args"], now[i]["args"]
            for key in sorted(set(before) | set(after)):
                if before.get(key) != after.get(key):
                    was = repr(before[key]) if key in before else "not set"
                    is_ = repr(after[key]) if key in after else "not set"
                    out.append(f"{now[i]['type']} (line {now[i]['line']}): {key} was {was.strip(chr(39))}, "
                               f"now {is_.strip(chr(39))}")
        if len(out) >= limit:
            break
    return out


def check_same_recipe(state: Mapping[str, Any], recipe: Recipe, allow_change: bool = False) -> None:
    """Refuse (:class:`RecipeChangedError`) a state saved with another recipe; with
    ``allow_change`` warn instead. A state without an identity (saved by an older release)
    is compared through the recipe text it holds, when it holds one."""
    saved = state.get("modifier_ids")
    if saved is None and isinstance(state.get("recipe"), str):
        from ..loader import loads

        try:
            saved = identity(loads(state["recipe"]))
        except Exception:  # noqa: BLE001 - an unreadable saved text cannot be compared
            saved = None
    if saved is None:
        return
    if recipe_hash(saved) == recipe_hash(identity(recipe)):
        return
    changes = recipe_changes(saved, recipe)
    where = recipe.path or "<recipe>"
    message = (f"the saved schedule state was made with another recipe than {where}: " + "; ".join(changes)
               + ". Resume with the recipe it was saved with, or pass allow_recipe_change=True to "
               "continue with this one on purpose (saved masks and counters follow modifier positions)")
    if not allow_change:
        raise RecipeChangedError(message)
    warnings.warn(message.split(". Resume")[0] + " (continuing: allow_recipe_change=True)", UserWarning, stacklevel=3)
