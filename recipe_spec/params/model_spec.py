"""Turning a model spec (``--model``) into parameter records, without importing a framework
until the spec itself needs one.

A model spec is one of:

- ``package.module:callable`` (or ``path/to/file.py:callable``): the module is imported (the
  current directory is on ``sys.path`` while it is) and the callable is called with no
  arguments; it must return a PyTorch ``nn.Module`` or a Keras 3 model or layer (an attribute
  that already *is* such a model is used as it is). The framework is told from the object's
  class hierarchy, and that framework's backend lists the parameters exactly (layer types,
  prunable flags, Keras aliases);
- a ``.keras`` file (``model.save()``; a legacy ``.h5`` too): loaded by the Keras backend with
  ``compile=False`` in safe mode;
- a ``.pt`` / ``.pth`` / ``.bin`` / ``.ckpt`` file (``torch.save``): a state_dict, or a
  checkpoint dict with a ``state_dict`` or ``model`` entry, loaded with ``weights_only=True``
  (a TorchScript archive is read with ``torch.jit.load``);
- a ``.safetensors`` file: its header is parsed here, with neither a framework nor the
  ``safetensors`` package;
- a ``.json`` parameter manifest (``recipe-spec params ... -o params.json``).

Which backend reads which file is each backend's declaration (``model_suffixes``); the
framework of a live model is the backend that owns it (:func:`recipe_spec.registry.backend_for`).
Weights-only files (state_dicts, safetensors) carry names and shapes but no layer types; their
prunable flag is a heuristic, see :func:`records_from_named_shapes`.

Every failure raises :class:`ModelSpecError` saying what was wrong and how to fix it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from .headers import (
    ModelSpecError,
    read_safetensors_header,
    records_from_named_shapes,
    records_from_safetensors,
)
from .records import ParamRecord

__all__ = [
    "ModelSpecError",
    "file_suffixes",
    "load_param_records",
    "load_model",
    "framework_of",
    "records_from_named_shapes",
    "records_from_safetensors",
    "read_safetensors_header",
]

#: File suffixes the core reads itself (the backends declare theirs).
_CORE_SUFFIXES = {".json": "manifest"}
_IDENT = r"[A-Za-z_]\w*"
_CALLABLE_SPEC = re.compile(rf"^(?P<module>{_IDENT}(?:\.{_IDENT})*|.+\.py):(?P<attr>{_IDENT}(?:\.{_IDENT})*)$")
_SPEC_FORMS = (
    "a model spec is package.module:callable (a function or class that builds the model with no "
    "arguments), path/to/file.py:callable, or a .keras/.h5, .pt/.pth/.bin/.ckpt, .safetensors or "
    ".json (parameter manifest) file"
)


# --------------------------------------------------------------------------- framework detection


def _backends() -> list[Any]:
    from ..registry import installed_backends

    return installed_backends()


def file_suffixes() -> dict[str, str]:
    """File suffix -> the backend that reads it (``"manifest"`` for parameter manifests)."""
    out = {suffix: b.name for b in _backends() for suffix in b.model_suffixes}
    out.update(_CORE_SUFFIXES)
    return out


def framework_of(obj: Any) -> str | None:
    """The name of the backend whose framework ``obj`` is a model of (asked of every
    backend, told from the class hierarchy's module names, so no framework is imported), or
    None.

    >>> framework_of(object()) is None
    True
    """
    if isinstance(obj, type):
        return None
    return next((b.name for b in _backends() if b.owns(obj)), None)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _install_hint(name: str) -> str:
    from ..diagnostics.packages import install_command

    return install_command(name)


def _backend(name: str, path: str | None = None) -> Any:
    """Backend ``name``, its framework checked as installed unless the backend reads the file
    at ``path`` without it (``framework_free_suffixes``)."""
    from ..registry import BackendError, get_backend

    try:
        backend = get_backend(name)
    except BackendError as exc:
        raise ModelSpecError(f"{exc}") from None
    free = path is not None and Path(path).suffix.lower() in backend.framework_free_suffixes
    if not free and not _installed(backend.framework):
        raise ModelSpecError(
            f"this model needs {backend.framework}, which is not installed: {_install_hint(name)}"
        )
    return backend


def _records_of(framework: str, model: Any, where: str) -> list[ParamRecord]:
    try:
        return list(_backend(framework).param_records(model))
    except ValueError as exc:
        raise ModelSpecError(f"{where} gave {exc}") from None


# --------------------------------------------------------------------------- callable specs


def _exc_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def _import_target(module_name: str, spec: str) -> Any:
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ModelSpecError(f"model spec {spec!r}: no such file {module_name!r}")
        stem = re.sub(r"\W", "_", path.stem)
        name = stem if stem not in sys.modules else f"_recipe_spec_model_{stem}"
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:
            raise ModelSpecError(f"model spec {spec!r}: {module_name} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = module
        try:
            file_spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    return importlib.import_module(module_name)


def _load_callable_spec(spec: str, module_name: str, attr: str) -> tuple[str, Any]:
    added: list[str] = []
    for entry in ([str(Path(module_name).resolve().parent)] if module_name.endswith(".py") else []) + [os.getcwd()]:
        if entry not in sys.path and not (entry == os.getcwd() and "" in sys.path):
            sys.path.insert(0, entry)
            added.append(entry)
    try:
        try:
            module = _import_target(module_name, spec)
        except ModelSpecError:
            raise
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if missing and (module_name == missing or module_name.startswith(missing + ".")):
                raise ModelSpecError(
                    f"model spec {spec!r}: no module named {missing!r}. Check the spelling, run "
                    "from the directory that holds it, or add that directory to PYTHONPATH"
                ) from None
            root = missing.split(".")[0]
            owner = next((b for b in _backends() if root in b.framework_modules), None)
            if owner is not None:
                raise ModelSpecError(
                    f"model spec {spec!r}: importing {module_name} needs {root}, which is not "
                    f"installed: {_install_hint(owner.name)}"
                ) from None
            raise ModelSpecError(
                f"model spec {spec!r}: importing {module_name} failed ({_exc_text(exc)}); install "
                "what it needs"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any error in the user's module is reported
            raise ModelSpecError(f"model spec {spec!r}: importing {module_name} raised {_exc_text(exc)}") from None

        obj: Any = module
        done: list[str] = []
        for part in attr.split("."):
            if not hasattr(obj, part):
                owner = module_name + "".join("." + d for d in done)
                names = [n for n in dir(obj) if not n.startswith("_")]
                close = difflib.get_close_matches(part, names, n=3, cutoff=0.5)
                hint = f" Did you mean {', '.join(close)}?" if close else (
                    f" It has: {', '.join(n for n in names if callable(getattr(obj, n, None)))[:300]}." if names else ""
                )
                raise ModelSpecError(f"model spec {spec!r}: {owner} has no attribute {part!r}.{hint}")
            obj = getattr(obj, part)
            done.append(part)

        if framework_of(obj) is not None:
            model = obj  # the attribute is the model itself
        elif not callable(obj):
            raise ModelSpecError(
                f"model spec {spec!r}: {attr} is a {type(obj).__name__}, not a callable. Point the "
                "spec at a function (or class) that builds and returns the model with no arguments"
            )
        else:
            try:
                model = obj()
            except Exception as exc:  # noqa: BLE001 - the user's code failed: say how
                hint = " (it is called with no arguments)" if isinstance(exc, TypeError) else ""
                raise ModelSpecError(f"model spec {spec!r}: calling {attr}() raised {_exc_text(exc)}{hint}") from None
    finally:
        for entry in added:
            try:
                sys.path.remove(entry)
            except ValueError:
                pass

    framework = framework_of(model)
    if framework is None:
        what = f"{type(model).__module__}.{type(model).__qualname__}"
        for backend in _backends():
            reason = backend.unsupported_model(model)
            if reason:
                raise ModelSpecError(f"model spec {spec!r}: {attr}() returned {reason} ({what})")
        kinds = "; ".join(f"{b.name}: {b.model_kind}" for b in _backends())
        raise ModelSpecError(
            f"model spec {spec!r}: {attr}() returned a {what}, which is not a model of any "
            f"backend ({kinds}). Return the model itself"
        )
    return framework, model


# --------------------------------------------------------------------------- weights-only files


def _file_kind(spec: str) -> str | None:
    return file_suffixes().get(Path(spec).suffix.lower())


def _check_file(spec: str) -> None:
    if os.path.isdir(spec):
        raise ModelSpecError(f"{spec}: is a directory; give the model file inside it ({_SPEC_FORMS})")
    if not os.path.isfile(spec):
        raise ModelSpecError(f"{spec}: no such file")


def load_model(spec: str | os.PathLike[str]) -> tuple[str, Any]:
    """``(framework, model)`` for a spec that describes a whole model: ``package.module:callable``,
    a ``.keras``/``.h5`` file or a TorchScript ``.pt``. Weights-only files raise
    :class:`ModelSpecError` (they hold no model to run)."""
    text = os.fspath(spec)
    kind = _file_kind(text)
    if kind is not None and kind != "manifest":
        _check_file(text)
        model = _backend(kind, text).load_model(text)
        if model is not None:
            return kind, model
    if kind is not None:
        raise ModelSpecError(
            f"{text}: holds weights (names and shapes) but no model to run; describe the model "
            "with package.module:callable (a function that builds it) or a .keras file"
        )
    match = _CALLABLE_SPEC.match(text)
    if match is None:
        _unknown(text)
        raise AssertionError  # pragma: no cover - _unknown always raises
    return _load_callable_spec(text, match["module"], match["attr"])


def _unknown(text: str) -> None:
    if not text.strip():
        raise ModelSpecError(f"the model spec is empty; {_SPEC_FORMS}")
    if os.path.exists(text):
        suffix = Path(text).suffix or "(none)"
        raise ModelSpecError(
            f"{text}: unknown model file suffix {suffix}; expected one of "
            f"{', '.join(file_suffixes())} ({_SPEC_FORMS})"
        )
    raise ModelSpecError(f"{text!r} is not a model spec and no such file exists; {_SPEC_FORMS}")


def load_param_records(spec: str | os.PathLike[str]) -> tuple[str, list[ParamRecord]]:
    """``(framework, records)`` for a model spec (see the module docstring).

    Raises :class:`ModelSpecError` naming what was wrong and how to fix it.

    >>> load_param_records("no_such_file.onnx")
    Traceback (most recent call last):
    ...
    recipe_spec.params.headers.ModelSpecError: 'no_such_file.onnx' is not a model spec and no such file exists; ...
    """
    text = os.fspath(spec)
    kind = _file_kind(text)
    if kind is not None:
        _check_file(text)
        if kind == "manifest":
            from .manifest import read_manifest

            try:
                return read_manifest(text)
            except ValueError as exc:
                raise ModelSpecError(str(exc)) from None
        backend = _backend(kind, text)
        try:
            return kind, list(backend.records_from_file(text))
        except ImportError as exc:
            raise ModelSpecError(
                f"{text}: {backend.framework} cannot be imported ({_exc_text(exc)}): {_install_hint(kind)}"
            ) from None
        except ValueError as exc:
            raise ModelSpecError(f"{text} gave {exc}") from None
    match = _CALLABLE_SPEC.match(text)
    if match is None:
        _unknown(text)
        raise AssertionError  # pragma: no cover - _unknown always raises
    framework, model = _load_callable_spec(text, match["module"], match["attr"])
    return framework, _records_of(framework, model, f"model spec {text!r}")
