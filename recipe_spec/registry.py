"""Finding backends without importing them.

Backends are Python packages that declare an entry point in the group
``recipe_spec.backends``; this distribution ships two, ``torch`` (package
``recipe_spec_torch``, folder ``backends/torch``) and ``keras`` (``recipe_spec_keras``,
folder ``backends/keras``). Nothing here imports a framework: the backend module is imported
only by :func:`get_backend`, and the framework only when the backend needs it.

A third-party backend registers itself in its own ``pyproject.toml``::

    [project.entry-points."recipe_spec.backends"]
    jax = "my_package.recipe_backend:backend"

or, at run time, with :func:`register_backend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Backend",
    "BackendError",
    "ENTRY_POINT_GROUP",
    "available_backends",
    "get_backend",
    "register_backend",
]

ENTRY_POINT_GROUP = "recipe_spec.backends"

# Used when the distribution's metadata is not installed (a source checkout on sys.path).
_BUILTIN = {"torch": "recipe_spec_torch:backend", "keras": "recipe_spec_keras:backend"}
_REGISTERED: dict[str, Callable[[], Any]] = {}
_LOADED: dict[str, Any] = {}


@runtime_checkable
class Backend(Protocol):
    """What a backend provides."""

    name: str
    framework: str

    def compile(self, recipe: Any, **options: Any) -> Any:
        """A runnable manager for ``recipe`` on this backend's framework."""


class BackendError(LookupError):
    """A backend is unknown or its framework is not installed."""


def _entry_points() -> dict[str, str]:
    from importlib import metadata

    found = dict(_BUILTIN)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = ep.value
    return found


def available_backends() -> list[str]:
    """The names of every backend that can be asked for (their frameworks may be missing).

    >>> {"torch", "keras"} <= set(available_backends())
    True
    """
    return sorted(set(_entry_points()) | set(_REGISTERED))


def register_backend(name: str, factory: Callable[[], Any]) -> None:
    """Make ``factory()`` the backend called ``name`` (replacing any other)."""
    _REGISTERED[name] = factory
    _LOADED.pop(name, None)


def get_backend(name: str) -> Any:
    """The backend called ``name``, imported on first use.

    Raises :class:`BackendError` naming the backends there are when ``name`` is unknown.
    """
    if name in _LOADED:
        return _LOADED[name]
    if name in _REGISTERED:
        backend = _REGISTERED[name]()
    else:
        target = _entry_points().get(name)
        if target is None:
            raise BackendError(
                f"unknown backend {name!r}; available: {', '.join(available_backends())}"
            )
        module_name, _, attr = target.partition(":")
        import importlib

        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendError(
                f"backend {name!r} cannot be imported ({exc}); install it with "
                f"pip install 'recipe-spec[{name}]'"
            ) from exc
        backend = getattr(module, attr) if attr else module
    _LOADED[name] = backend
    return backend
