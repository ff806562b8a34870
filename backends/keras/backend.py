"""The backend object that ``recipe_spec.get_backend("keras")`` returns: what the Keras 3
backend declares and the model operations it supplies (the contract is
:class:`recipe_spec.registry.Backend`). Importing this module does not import Keras."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from recipe_spec.params import ParamRecord

from .layout import canonical_axes

__all__ = ["backend", "KerasBackend", "CAPABILITIES", "canonical_axes"]

#: What the Keras runtime really does (words of :mod:`recipe_spec.modifiers.spec`).
CAPABILITIES = frozenset({
    "masks", "scores:magnitude", "scores:mfac", "scores:obs", "gradients", "lr", "weight_decay",
    "trainable", "layers", "quantization", "acdc", "scores:movement", "loss", "teacher",
    "oneshot", "scores:sparsegpt", "scores:wanda", "transform:smoothquant", "transform:awq", "prune:experts",
    "oneshot:quantize", "scores:gptq", "transform:rotations",
})

#: PyTorch parameter names and their Keras names, by owning layer kind.
_TORCH_LEAVES = {"running_mean": "moving_mean", "running_var": "moving_variance"}


def _keras_leaf(record: ParamRecord) -> str:
    leaf = record.name.rsplit(".", 1)[-1]
    kind = record.layer_type.lower()
    if leaf in _TORCH_LEAVES:
        return _TORCH_LEAVES[leaf]
    if "norm" in kind:
        return {"weight": "gamma", "bias": "beta"}.get(leaf, leaf)
    if "embedding" in kind and leaf == "weight":
        return "embeddings"
    return {"weight": "kernel"}.get(leaf, leaf)


class KerasBackend:
    """Runs recipes on Keras 3."""

    name = "keras"
    framework = "keras"
    framework_modules = ("keras", "tensorflow")
    capabilities = CAPABILITIES
    model_kind = "a Keras 3 model or layer"
    model_suffixes = (".keras", ".h5")
    framework_free_suffixes = ()

    def framework_available(self) -> bool:
        """Whether Keras 3 is installed (checked without importing it)."""
        return importlib.util.find_spec(self.framework) is not None

    def owns(self, model: Any) -> bool:
        """Whether ``model`` is a Keras 3 model or layer (told from its class names)."""
        if isinstance(model, type):
            return False
        for cls in type(model).__mro__:
            module = getattr(cls, "__module__", "") or ""
            if cls.__name__ == "Layer" and module.startswith("keras.") and ".engine." not in module:
                return True
        return False

    def unsupported_model(self, model: Any) -> str | None:
        """A Keras 2 (``tf.keras`` / ``tf_keras``) model: why it cannot run here."""
        for cls in type(model).__mro__:
            module = getattr(cls, "__module__", "") or ""
            if cls.__name__ == "Layer" and (module.startswith(("tf_keras.", "tensorflow.")) or ".engine." in module):
                return (
                    "a Keras 2 (tf.keras / tf_keras) model; recipe-spec supports Keras 3: build "
                    "it with `import keras` (Keras 3)"
                )
        return None

    def compile(self, recipe: Any, **options: Any) -> Any:
        """A manager that applies ``recipe`` on Keras 3."""
        if not self.framework_available():
            from recipe_spec.diagnostics.packages import MissingPackageError

            raise MissingPackageError("keras", "the keras backend")
        import os

        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        from .manager import KerasManager

        return KerasManager(recipe, **options)

    def calibration_host(self, model: Any) -> Any:
        """The one-shot calibration host of ``model``
        (:class:`recipe_spec.oneshot.host.CalibrationHost`), a context manager: Dense and
        EinsumDense layers as Linear modules, a keras-hub model under its Hugging Face
        checkpoint's names (:mod:`recipe_spec_keras.oneshot`)."""
        from .oneshot import KerasCalibrationHost

        return KerasCalibrationHost(model)

    def param_records(self, model: Any) -> list[ParamRecord]:
        """The variables of a Keras 3 model as :class:`~recipe_spec.params.ParamRecord`
        values (path relative to the model, portable alias). ``ValueError`` for a model that
        is not built yet (it has no variables)."""
        from .params import param_records

        records = param_records(model)
        if not records and getattr(model, "built", True) is False:
            raise ValueError(
                "a Keras model that is not built yet, so it has no variables: give it a "
                "keras.Input, or call it once on example data (or model.build(input_shape)) "
                "before returning it"
            )
        return records

    def records_from_file(self, path: str) -> list[ParamRecord]:
        """The variables of a model saved with ``model.save()``."""
        return self.param_records(self.load_model(path))

    def load_model(self, path: str) -> Any:
        """A model saved with ``model.save()`` (``.keras``), loaded with ``compile=False``."""
        from .params import load_model

        return load_model(path)

    def canonical_axes(self, layer_type: str, ndim: int) -> tuple[int, ...]:
        """See :func:`canonical_axes`."""
        return canonical_axes(layer_type, ndim)

    def own_names(self, records: Sequence[ParamRecord], source: str) -> list[ParamRecord]:
        """Another backend's records under Keras paths (``fc1/kernel``), their own names kept
        as portable aliases."""
        if source == self.name:
            return list(records)
        return [
            ParamRecord("/".join(r.name.split(".")[:-1] + [_keras_leaf(r)]), r.shape, r.layer_type, r.prunable, r.name)
            for r in records
        ]


backend = KerasBackend()
