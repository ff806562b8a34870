"""What the Keras calibration host (:mod:`.oneshot`) tells the one-shot checks before a run and
what it keeps to undo one, mirroring the PyTorch host's module of the same name.

**Before** (:mod:`recipe_spec.oneshot.preflight`): :meth:`ModelState.describe` reads an
array of a calibration sample (NumPy, a framework tensor or a list); :meth:`~ModelState.input_limits`
the vocabulary size and positions of a keras-hub backbone (``vocabulary_size``,
``max_sequence_length``) or of the model's token embedding; :meth:`~ModelState.non_finite`
the variables holding NaN or infinity; :meth:`~ModelState.quantized_names` the layers already
quantized (a Keras quantization mode).

**Undo** (:mod:`recipe_spec.oneshot.journal`): :meth:`~ModelState.keep` copies the variables
a module's weight and bias live in before their first change, :meth:`~ModelState.put_back`
assigns them back; :meth:`~ModelState.shell` and :meth:`~ModelState.restore_shell` keep the
quantization the host recorded (schemes attached, layers pending), which lives in the host
until the run ends, and the experts REAP removes (:meth:`~.expert_pruning.ExpertPruning.structure`). The layers become Keras's quantized layers only once the run is over
(:meth:`~.quantized_host.QuantizedWeights.finish`, when leaving the host or saving): an error
while ``model.keras`` is written after that leaves them quantized (and no folder behind).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import keras
from recipe_spec.oneshot.data_checks import ArrayFacts

from .hub import backbone_of
from .params import assign_array, numpy_value

__all__ = ["ModelState"]


def _kind(a: np.ndarray) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(a.dtype.kind, "other")


class ModelState:
    """The host's part described in the module docstring."""

    model: Any
    _layers: dict[str, Any]
    _linear: dict[str, Any]

    # -- before --------------------------------------------------------------------------------
    def describe(self, value: Any) -> ArrayFacts | None:
        if value is None or isinstance(value, (str, bytes, dict)):
            return None
        try:
            a = np.asarray(keras.ops.convert_to_numpy(value)) if not isinstance(value, (list, tuple)) \
                else np.asarray(value)
        except (TypeError, ValueError, RuntimeError):
            return None
        kind = _kind(a)
        if kind == "other":
            return None if a.dtype.kind in "OUS" else ArrayFacts(tuple(a.shape), kind, str(a.dtype))
        low = high = None
        if a.size:
            flat = a.reshape(-1).astype(np.int64) if kind == "bool" else a.reshape(-1)
            low, high = float(flat.min()), float(flat.max())
        return ArrayFacts(tuple(int(d) for d in a.shape), kind, str(a.dtype), low, high)

    def input_limits(self) -> tuple[int | None, int | None]:
        backbone = backbone_of(self.model)
        vocab = positions = None
        if backbone is not None:
            vocab = getattr(backbone, "vocabulary_size", None)
            positions = getattr(backbone, "max_sequence_length", None)
        if vocab is None:
            embedding = getattr(backbone if backbone is not None else self.model, "token_embedding", None)
            vocab = getattr(embedding if embedding is not None else self._input_embedding(), "input_dim", None)
        return (int(vocab) if isinstance(vocab, int) else None,
                int(positions) if isinstance(positions, int) and positions > 0 else None)

    def _input_embedding(self) -> Any:
        """The Embedding layer a functional model feeds its first input to, None when none."""
        try:
            first = self.model.inputs[0]
        except (AttributeError, IndexError, TypeError, ValueError):
            return None
        for layer in self._layers.values():
            try:
                if isinstance(layer, keras.layers.Embedding) and layer.input is first:
                    return layer
            except (AttributeError, ValueError):
                continue
        return None

    def non_finite(self) -> list[str]:
        out = []
        for v in self.model.weights:
            a = np.asarray(keras.ops.convert_to_numpy(v))
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                out.append(str(getattr(v, "path", v.name)))
        return out

    def quantized_names(self) -> list[str]:
        return [name for name, layer in self._layers.items() if getattr(layer, "quantization_mode", None)]

    # -- undo ----------------------------------------------------------------------------------
    def _variables(self, name: str) -> list[Any]:
        found: list[Any] = []
        lin = self._linear.get(name)
        if lin is not None:
            found += [lin.variable, getattr(lin.layer, "bias", None)]
        layer = self._layers.get(name)
        if layer is not None and lin is None:
            found += list(layer.weights)
        unique: dict[int, Any] = {}
        for v in found:
            if isinstance(v, keras.Variable):
                unique.setdefault(id(v), v)
        return list(unique.values())

    def keep(self, name: str) -> list[tuple[Any, np.ndarray]]:
        return [(v, np.array(numpy_value(v), copy=True)) for v in self._variables(name)]

    def put_back(self, name: str, kept: Sequence[tuple[Any, np.ndarray]]) -> None:
        for variable, value in kept:
            assign_array(variable, value)

    def shell(self) -> tuple[dict[str, Any], dict[str, Any], list[Any], list[Any]]:
        self._quantized_state()  # type: ignore[attr-defined]
        return (dict(self._pending), dict(self._schemes), list(self.quantized),  # type: ignore[attr-defined]
                self.structure())  # type: ignore[attr-defined]

    def restore_shell(self, shell: tuple[dict[str, Any], dict[str, Any], list[Any], list[Any]]) -> None:
        pending, schemes, done, structure = shell
        self.restore_structure(structure)  # type: ignore[attr-defined]
        self._pending, self._schemes, self.quantized = dict(pending), dict(schemes), list(done)
