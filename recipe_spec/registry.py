"""Backends: the contract a backend fulfils, and finding backends without importing them.

A backend is a Python package that declares an entry point in the group
``recipe_spec.backends``; its object satisfies :class:`Backend`. This distribution ships two
(``backends/torch`` and ``backends/keras``), declared in its ``pyproject.toml``; the core names
neither. Nothing here imports a framework: the backend module is imported only by
:func:`get_backend` (or :func:`backend_for`), and its framework only when the backend needs it.

A third-party backend registers itself in its own ``pyproject.toml``::

    [project.entry-points."recipe_spec.backends"]
    jax = "my_package.recipe_backend:backend"

or, at run time, with :func:`register_backend`. Which modifiers a backend runs is not written
anywhere: it follows from its :attr:`Backend.capabilities` and each modifier's declared needs
(:func:`recipe_spec.modifiers.supported_by`), so B001, ``schemas/backends.json`` and the docs
can never claim a modifier that the backend does not run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .params.records import ParamRecord
    from .recipe.model import Recipe

__all__ = [
    "Backend",
    "BackendError",
    "ENTRY_POINT_GROUP",
    "available_backends",
    "backend_capabilities",
    "canonical_shape",
    "backend_for",
    "get_backend",
    "installed_backends",
    "register_backend",
    "supported_modifiers",
]

ENTRY_POINT_GROUP = "recipe_spec.backends"

_REGISTERED: dict[str, Callable[[], Any]] = {}
_LOADED: dict[str, Any] = {}


@runtime_checkable
class Backend(Protocol):
    """What a backend supplies. Importing the module that holds this object must not import
    the framework: every member but :meth:`compile`, :meth:`param_records` and
    :meth:`load_model` answers without it.

    Declarations:

    - ``name``: the backend's name (``--backend NAME``, ``recipe.compile(NAME)``);
    - ``framework``: the import name of the framework it needs (for install hints);
    - ``model_kind``: what its models are, in words (``"a torch.nn.Module"``);
    - ``framework_modules``: top-level modules whose absence means the framework is missing;
    - ``capabilities``: what its runtime really does (words listed in
      :mod:`recipe_spec.modifiers.spec`); a modifier runs here exactly when its needs are a
      subset;
    - ``model_suffixes``: the model or weight files it reads (``.pt``, ``.keras``, ...), and
      ``framework_free_suffixes``: those it reads without its framework (a header format).

    Operations on models (the runtime's own tensor operations live in the runtime that
    :meth:`compile` returns: see :class:`recipe_spec.runtime.RecipeRuntime`):

    - :meth:`owns`: whether an object is a model of this framework, told from class names;
      :meth:`unsupported_model`: why an object of a related framework cannot run here;
    - :meth:`param_records`: a live model's parameters as neutral records;
    - :meth:`records_from_file` / :meth:`load_model`: what a model file holds;
    - :meth:`canonical_axes`: where a parameter's (out, in, spatial...) axes are in its own
      layout, the axis mapping every mask algorithm sees kernels through;
    - :meth:`own_names`: another backend's records as this backend would name them.
    """

    name: str
    framework: str
    model_kind: str
    framework_modules: tuple[str, ...]
    capabilities: frozenset[str]
    model_suffixes: tuple[str, ...]
    framework_free_suffixes: tuple[str, ...]

    def framework_available(self) -> bool:
        """Whether the framework is installed (checked without importing it)."""

    def owns(self, model: Any) -> bool:
        """Whether ``model`` is a model of this backend's framework (no import)."""

    def unsupported_model(self, model: Any) -> str | None:
        """Why ``model`` (not owned) looks like a model this backend cannot run, or None."""

    def compile(self, recipe: Recipe, **options: Any) -> Any:
        """A runtime (:class:`recipe_spec.runtime.RecipeRuntime`) for ``recipe``."""

    def param_records(self, model: Any) -> list[ParamRecord]:
        """The parameters of a live model; ``ValueError`` saying why they cannot be listed."""

    def records_from_file(self, path: str) -> list[ParamRecord]:
        """The parameters a model or weights file holds (names and shapes)."""

    def load_model(self, path: str) -> Any:
        """The model a file holds; None when it holds weights only (names and shapes)."""

    def canonical_axes(self, layer_type: str, ndim: int) -> tuple[int, ...]:
        """For each canonical axis (out, in, spatial...), the axis of this layout."""

    def own_names(self, records: Sequence[ParamRecord], source: str) -> list[ParamRecord]:
        """``records`` of a ``source``-backend model, named as this backend names them."""


class BackendError(LookupError):
    """A backend is unknown or its framework is not installed."""


def _entry_points() -> dict[str, str]:
    from importlib import metadata

    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """The names of every backend that can be asked for (their frameworks may be missing).

    >>> len(available_backends()) >= 1
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

        from .diagnostics.packages import EXTRAS, install_command

        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendError(
                f"backend {name!r} cannot be imported ({exc}); install it with "
                f"{install_command(name) if name in EXTRAS else 'pip install ' + name}"
            ) from exc
        backend = getattr(module, attr) if attr else module
    _LOADED[name] = backend
    return backend


def installed_backends() -> list[Any]:
    """Every backend whose package can be imported, in name order (their frameworks may be
    missing); a backend that cannot be imported is left out."""
    found = []
    for name in available_backends():
        try:
            found.append(get_backend(name))
        except BackendError:
            continue
    return found


def backend_for(model: Any, caller: str = "modify()") -> Any:
    """The backend whose framework ``model`` belongs to (asked of every backend, no import).

    Raises ``TypeError`` naming the backends there are (and ``caller``, the function given
    the model) when none owns it.
    """
    backends = installed_backends()
    for backend in backends:
        if backend.owns(model):
            return backend
    kinds = "; ".join(f"{b.name}: {b.model_kind}" for b in backends)
    raise TypeError(f"{caller} got a {type(model).__name__}, which is not a model of any backend ({kinds})")


def backend_with(capability: str) -> Any:
    """The first installed backend (in name order) that declares ``capability`` (e.g.
    ``"checkpoint:huggingface"``: it loads a Hugging Face checkpoint folder); ``BackendError``
    naming the capability when none does."""
    for backend in installed_backends():
        if capability in backend.capabilities:
            return backend
    from .diagnostics.packages import install_command

    raise BackendError(f"no installed backend can do {capability!r}: install one that can "
                       f"({install_command('oneshot')} for Hugging Face checkpoints)")


def supported_modifiers(name: str) -> frozenset[str]:
    """The modifiers backend ``name`` runs: those whose every declared need it has.

    >>> "GMPruningModifier" in supported_modifiers(available_backends()[0])
    True
    """
    from .modifiers import supported_by

    return supported_by(get_backend(name).capabilities)


def backend_capabilities() -> dict[str, frozenset[str]]:
    """Each installed backend's name and declared capabilities."""
    return {b.name: frozenset(b.capabilities) for b in installed_backends()}


def canonical_shape(record: ParamRecord, framework: str | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(axes, shape)``: where the record's canonical (out, in, spatial...) axes are in its own
    layout (the ``framework`` backend's axis mapping) and its shape in canonical order."""
    axes = tuple(range(len(record.shape)))  # records named as written: canonical already
    if framework is not None:
        try:
            axes = tuple(get_backend(framework).canonical_axes(record.layer_type, len(record.shape)))
        except (BackendError, ValueError):
            pass
    return axes, tuple(record.shape[a] for a in axes)
