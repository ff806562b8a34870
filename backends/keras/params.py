"""Keras 3 models and files described as neutral :class:`~recipe_spec.params.ParamRecord` lists.

SPEC, "Parameter targeting": on Keras a variable is matched by its path relative to the model
(``fc1/kernel``) and by its portable alias (``fc1.weight``, from
:func:`recipe_spec.params.portable_alias`).

How the path is made. Keras 3 gives every variable a ``path``, but that is the *name scope it
was created in*, which depends on how and where the layer was built, not on where it sits in
the model (Keras 3.15):

- functional model ``keras.Model(inputs, outputs, name="twin")``: ``conv1/kernel`` (no model
  prefix: its layers are built while the graph is traced, outside the model's scope);
- ``keras.Sequential(..., name="seq")``: ``seq/dense/kernel`` (built inside the model's scope);
  a layer built before it was added keeps ``dense/kernel``;
- subclassed ``keras.Model`` named ``sub``: ``sub/block_1/dense/kernel``;
- a functional model nested in another: its layers' paths lack the inner model's name, so two
  ``d/kernel`` can appear in one model.

So the name here is made from the model's structure instead: the names of the layers from
the model (excluded) down to the layer that owns the variable, then the variable's own name,
joined with ``/``. For the usual models this is exactly Keras' ``variable.path`` minus the
model's name prefix (``conv1/kernel``, ``dense/kernel``, ``block_1/dense/kernel``); it is the
same however the model was built, and a nested model contributes its name
(``inner/d/kernel``). Names are unique: should two sibling layers (or two variables of one
layer) share a name, the later ones get ``_1``, ``_2``... as Keras itself does for auto-names.
The records follow the order of ``model.weights`` (trainable and non-trainable variables;
no optimizer, metric or seed-generator state).

``prunable``: the ``kernel`` of Dense, Conv1D/2D/3D and Conv1DTranspose/2DTranspose/
3DTranspose and the ``embeddings`` of Embedding, subclasses included (the SPEC's list: Linear/
Dense, Conv and ConvTranspose 1-3d, Embedding). Depthwise and separable convolutions,
EinsumDense (attention projections) and LSTM/GRU cells are not in that list and are not
prunable; Keras 3 has no QAT layer classes (its int8 ``quantize()`` keeps a Dense's
``kernel``, which stays prunable).

Keras is imported by the functions here, never at module import time.
"""

from __future__ import annotations

import os
from typing import Any

from recipe_spec.params import ParamRecord, portable_alias
from recipe_spec.params.headers import ModelSpecError

__all__ = ["named_variables", "param_records", "numpy_value", "host_to_backend", "assign_array", "load_model",
           "PRUNABLE"]

#: (layer class names in ``keras.layers``, the variable name that is prunable)
PRUNABLE = (
    (("Dense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"), "kernel"),
    (("Embedding",), "embeddings"),
)


def _children(layer: Any) -> list[Any]:
    """The direct sub-layers of ``layer``, in tracking order."""
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is not None:
        try:
            return list(flatten(include_self=False, recursive=False))
        except TypeError:
            pass
    return list(getattr(layer, "_layers", None) or [])


def _own_variables(layer: Any) -> list[Any]:
    """The variables ``layer`` itself created (not those of its sub-layers)."""
    return list(getattr(layer, "_trainable_variables", None) or []) + list(
        getattr(layer, "_non_trainable_variables", None) or []
    )


def _var_name(variable: Any) -> str:
    name = str(getattr(variable, "name", "") or "")
    return name.rsplit("/", 1)[-1].split(":", 1)[0] or "variable"


def _unique(names: list[str]) -> list[str]:
    """``names`` with later duplicates renamed ``name_1``, ``name_2``... (never clashing)."""
    taken = set(names)
    seen: set[str] = set()
    out = []
    for n in names:
        if n in seen:
            k = 1
            while f"{n}_{k}" in taken:
                k += 1
            n = f"{n}_{k}"
            taken.add(n)
        seen.add(n)
        out.append(n)
    return out


def _strip_model_prefix(path: str, model: Any) -> str:
    prefix = f"{getattr(model, 'name', '')}/"
    return path[len(prefix):] if prefix != "/" and path.startswith(prefix) else path


def named_variables(model: Any) -> list[tuple[str, Any, Any]]:
    """``(name, variable, owning layer)`` for every variable in ``model.weights``, in that
    order; ``name`` is the variable's path relative to the model (see the module docstring).
    """
    found: dict[int, tuple[str, Any]] = {}
    visited: set[int] = set()

    def walk(layer: Any, prefix: str) -> None:
        if id(layer) in visited:
            return
        visited.add(id(layer))
        variables = _own_variables(layer)
        for var, vname in zip(variables, _unique([_var_name(v) for v in variables]), strict=True):
            found.setdefault(id(var), (prefix + vname, layer))
        children = _children(layer)
        for child, cname in zip(children, _unique([str(getattr(c, "name", "layer")) for c in children]), strict=True):
            walk(child, f"{prefix}{cname}/")

    walk(model, "")
    out = []
    names: list[str] = []
    for var in model.weights:
        name, owner = found.get(id(var), (None, model))
        if name is None:  # not reachable through the layer tree: fall back on Keras' own path
            name = _strip_model_prefix(str(getattr(var, "path", "") or _var_name(var)), model)
        out.append((var, owner))
        names.append(name)
    return [(n, v, o) for n, (v, o) in zip(_unique(names), out, strict=True)]


def _prunable_classes() -> list[tuple[tuple[type, ...], str]]:
    import keras

    return [
        (tuple(getattr(keras.layers, c) for c in classes if hasattr(keras.layers, c)), var)
        for classes, var in PRUNABLE
    ]


def param_records(model: Any) -> list[ParamRecord]:
    """One record per variable of ``model.weights`` (trainable and non-trainable).

    ``name``: the path relative to the model (``fc1/kernel``, ``block_1/bn/moving_mean``);
    ``alias``: its portable name (``fc1.weight``, ``block_1.bn.running_mean``);
    ``layer_type``: the class name of the owning layer; ``prunable``: see the module docstring.
    An unbuilt model has no variables yet: build it (call it once, or give it an ``Input``).
    """
    prunable = _prunable_classes()
    records = []
    for name, var, owner in named_variables(model):
        local = _var_name(var)
        records.append(
            ParamRecord(
                name=name,
                shape=tuple(int(d) for d in var.shape),
                layer_type=type(owner).__name__,
                prunable=any(local == vname and isinstance(owner, classes) for classes, vname in prunable),
                alias=portable_alias(name),
            )
        )
    return records


def numpy_value(x: Any) -> Any:
    """A variable's (or tensor's) value as a NumPy array. TensorFlow variables are read with
    ``.numpy()``: ``np.asarray`` on one (what ``keras.ops.convert_to_numpy`` does) raises a
    DeprecationWarning under NumPy 2 at every call."""
    import numpy as np

    import keras

    if isinstance(x, keras.Variable) and keras.backend.backend() == "tensorflow":
        return np.asarray(x.numpy())
    return np.asarray(keras.ops.convert_to_numpy(x))


def host_to_backend(x: Any) -> Any:
    """A NumPy array as a Keras variable takes it in (``variable.assign``, an initializer's
    value): on JAX a device array made by ``jax.device_put``, because JAX 0.10's
    ``jnp.asarray`` of a NumPy array (what Keras calls) compiles a small program for each new
    shape and dtype (15 ms each here, ``benchmarks/numpy_copies.py``); on the other backends
    ``x`` as it is.

    >>> import numpy as np
    >>> host_to_backend(np.zeros(2)).shape
    (2,)
    """
    import keras

    if keras.backend.backend() != "jax":
        return x
    import jax

    return jax.device_put(x)


def assign_array(variable: Any, value: Any) -> None:
    """Write the NumPy array ``value`` into the Keras ``variable``: cast to the variable's dtype
    and taken in through :func:`host_to_backend`."""
    import numpy as np

    import keras

    kind = keras.backend.standardize_dtype(variable.dtype)
    variable.assign(host_to_backend(np.asarray(value).astype(kind, copy=False)))


def load_model(path: str | os.PathLike[str]) -> Any:
    """A model saved with ``model.save()`` (``.keras``, or a legacy ``.h5``), without its
    optimizer (``compile=False``) and in safe mode (no arbitrary code is deserialised).

    Raises :class:`~recipe_spec.params.model_spec.ModelSpecError` saying why it cannot be read.
    """
    import keras

    where = os.fspath(path)
    try:
        return keras.saving.load_model(where, compile=False)
    except Exception as exc:  # noqa: BLE001 - keras raises many kinds for bad files
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        hint = "Check that the file was written by model.save() with Keras 3."
        if "locate" in text or "custom_objects" in text or "register_keras_serializable" in text:
            hint = (
                "The model uses a custom class that is not registered: decorate it with "
                "@keras.saving.register_keras_serializable() and import its module first, or "
                "describe the model with --model package.module:callable (a function that builds it)."
            )
        raise ModelSpecError(f"{where}: Keras cannot load this model ({type(exc).__name__}: {first[:300]}). {hint}") from None
