"""Immutable containers for recipe values.

Loaded recipes are values: mappings become :class:`FrozenDict`, lists become tuples.
:func:`thaw` turns them back into plain ``dict``/``list`` for code that needs those
(``json.dumps``, jsonschema).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

__all__ = ["FrozenDict", "freeze", "thaw"]


class FrozenDict(Mapping[Any, Any]):
    """A read-only, insertion-ordered mapping that compares equal to a ``dict``.

    >>> d = FrozenDict({"a": 1})
    >>> d["a"], d == {"a": 1}
    (1, True)
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[Any, Any] | None = None):
        self._data: dict[Any, Any] = dict(data or {})
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # The Mapping mixins go through __getitem__ for every entry; the dict answers directly.
    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> KeysView[Any]:
        return self._data.keys()

    def values(self) -> ValuesView[Any]:
        return self._data.values()

    def items(self) -> ItemsView[Any, Any]:
        return self._data.items()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"


def freeze(value: Any) -> Any:
    """``value`` with every dict replaced by a FrozenDict and every list by a tuple."""
    if isinstance(value, Mapping):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """``value`` with mappings as plain dicts and tuples as plain lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value
