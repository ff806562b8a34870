"""The Hugging Face names of a keras-hub model's variables, read from keras-hub's own
conversion tables.

A keras-hub model loaded from a Hugging Face checkpoint (``LlamaCausalLM.from_preset(folder)``)
was filled by a converter module of ``keras_hub.src.utils.transformers`` (``convert_llama3``
for Llama): its ``convert_weights(backbone, loader, config)`` calls
``loader.port_weight(keras_variable=..., hf_weight_key=...)`` once per checkpoint tensor.
:func:`hf_names` runs that function with a loader that only records those pairs (nothing is
read or assigned), so a recipe written with the checkpoint's names
(``model.layers.0.self_attn.q_proj``, ``lm_head``) finds the Keras variables they were loaded
into, as keras-hub itself maps them.

keras-hub is imported only when a model is a keras-hub model (its ``backbone`` is a
``keras_hub.models.Backbone``); any other model has no such names (``{}``).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
from typing import Any

__all__ = ["backbone_of", "hf_names", "converter_for"]

_LOG = logging.getLogger("recipe_spec.oneshot")
_PACKAGE = "keras_hub.src.utils.transformers"


def backbone_of(model: Any) -> Any:
    """The keras-hub backbone of ``model`` (a task's ``backbone``, or the model itself), None
    for a model that keras-hub did not build (keras-hub is not imported for it)."""
    if "keras_hub" not in sys.modules:
        return None
    from keras_hub.models import Backbone

    if isinstance(model, Backbone):
        return model
    backbone = getattr(model, "backbone", None)
    return backbone if isinstance(backbone, Backbone) else None


def converter_for(backbone: Any) -> Any:
    """keras-hub's Hugging Face converter module for ``backbone``'s class (the one whose
    ``backbone_cls`` it is, the most derived match first), None when keras-hub has none."""
    package = importlib.import_module(_PACKAGE)
    best: tuple[int, Any] = (-1, None)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("convert_"):
            continue
        try:
            module = importlib.import_module(f"{_PACKAGE}.{info.name}")
        except ImportError:  # a converter whose optional dependency is missing
            continue
        cls = getattr(module, "backbone_cls", None)
        if isinstance(cls, type) and isinstance(backbone, cls):
            depth = len(cls.__mro__)
            if depth > best[0]:
                best = (depth, module)
    return best[1]


class _Recorder:
    """A stand-in for keras-hub's ``SafetensorLoader`` that records which checkpoint tensor
    each Keras variable would be loaded from."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
        self.names.setdefault(id(keras_variable), hf_weight_key)

    def get_tensor(self, hf_weight_key: str) -> Any:
        raise LookupError(f"the converter reads {hf_weight_key!r} itself")

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _NoConfig(dict):  # type: ignore[type-arg]
    """The Hugging Face config handed to the converter: the recorder reads no tensor, and a
    converter that needs a config value to say where a weight goes is not followed."""

    def __getitem__(self, key: str) -> Any:
        raise LookupError(f"the converter needs the checkpoint's config value {key!r}")


def hf_names(model: Any) -> dict[int, str]:
    """``{id(variable): checkpoint tensor name}`` for the variables of keras-hub ``model``
    (``model.layers.0.self_attn.q_proj.weight``), in the converter's order; ``{}`` for a model
    keras-hub did not build or has no converter for. A converter that stops part-way (it
    needs the checkpoint's config or reads tensors itself) gives the names ported before."""
    backbone = backbone_of(model)
    if backbone is None:
        return {}
    module = converter_for(backbone)
    if module is None or not hasattr(module, "convert_weights"):
        return {}
    recorder = _Recorder()
    try:
        module.convert_weights(backbone, recorder, _NoConfig())
    except (LookupError, KeyError, TypeError, AttributeError, ValueError) as exc:
        _LOG.info("keras-hub's %s names %d variables before it stops: %s", module.__name__,
                  len(recorder.names), exc)
    return recorder.names
