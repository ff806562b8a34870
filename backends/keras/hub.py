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

:func:`load_causal_lm` loads a checkpoint folder as keras-hub does (``from_preset``) and gives
the backbone the normalisation epsilon of the checkpoint's ``config.json``
(``rms_norm_eps``/``layer_norm_eps``) where keras-hub's converter leaves it out: keras-hub 0.32's
Llama converter does, so a Llama trained with ``rms_norm_eps: 1e-5`` otherwise runs with
keras-hub's default 1e-6 and its logits differ from the checkpoint's own.
:func:`warn_config_differences` (the one-shot host calls it) logs a warning for a keras-hub
model whose backbone differs from the ``config.json`` of the folder it was loaded from, where
that folder is known (:func:`checkpoint_of`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import pkgutil
import sys
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["hf_architecture", "backbone_of", "hf_names", "hf_tables", "converter_for", "load_causal_lm", "missing_config", "checkpoint_of",
           "config_differences", "warn_config_differences", "remember_checkpoint"]

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
    each Keras variable would be loaded from, and which tensors a converter reads itself
    (``get_tensor``, keras-hub's expert banks: stacked in NumPy, then assigned)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        #: ``id(variable): [checkpoint tensor names read since the previous assignment]``
        self.reads: dict[int, list[str]] = {}
        self._since: list[str] = []

    def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
        self.names.setdefault(id(keras_variable), hf_weight_key)

    def get_tensor(self, hf_weight_key: str) -> Any:
        import numpy as np

        self._since.append(hf_weight_key)
        return np.zeros((1, 1), dtype=np.float32)  # a stand-in: its assignment is not carried out

    def assigned(self, variable: Any) -> None:
        self.reads.setdefault(id(variable), []).extend(self._since)
        self._since = []

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _NoConfig(dict):  # type: ignore[type-arg]
    """The Hugging Face config handed to the converter: the recorder reads no tensor, and a
    converter that needs a config value to say where a weight goes is not followed."""

    def __getitem__(self, key: str) -> Any:
        raise LookupError(f"the converter needs the checkpoint's config value {key!r}")


@contextlib.contextmanager
def _assignments_recorded(backbone: Any, recorder: _Recorder) -> Iterator[None]:
    """While the converter runs on the recorder, an ``assign`` to a variable of ``backbone``
    tells the recorder instead of writing the stand-in values."""
    classes = {type(v) for v in backbone.weights}
    saved = {cls: cls.__dict__.get("assign") for cls in classes}
    for cls in classes:
        cls.assign = lambda self, value, _rec=recorder: _rec.assigned(self)
    try:
        yield
    finally:
        for cls, original in saved.items():
            if original is None:
                del cls.assign
            else:
                cls.assign = original


def _recorded(model: Any) -> _Recorder:
    recorder = _Recorder()
    backbone = backbone_of(model)
    if backbone is None:
        return recorder
    module = converter_for(backbone)
    if module is None or not hasattr(module, "convert_weights"):
        return recorder
    try:
        with _assignments_recorded(backbone, recorder):
            module.convert_weights(backbone, recorder, _NoConfig())
    except (LookupError, KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        _LOG.info("keras-hub's %s names %d variables before it stops: %s", module.__name__,
                  len(recorder.names), exc)
    return recorder


def hf_names(model: Any) -> dict[int, str]:
    """``{id(variable): checkpoint tensor name}`` for the variables of keras-hub ``model``
    (``model.layers.0.self_attn.q_proj.weight``), in the converter's order; ``{}`` for a model
    keras-hub did not build or has no converter for. A converter that stops part-way (it
    needs the checkpoint's config) gives the names ported before."""
    return _recorded(model).names


def hf_tables(model: Any) -> tuple[dict[int, str], dict[int, list[str]]]:
    """:func:`hf_names`, and ``{id(variable): checkpoint tensor names}`` for the variables
    keras-hub's converter fills from tensors it reads itself (an expert bank: every expert's
    projections stacked into one variable), each with the tensors read since the assignment
    before it; from one run of the converter."""
    recorder = _recorded(model)
    return recorder.names, recorder.reads


#: Hugging Face config keys read as a keras-hub backbone's ``layer_norm_epsilon``.
_EPSILON_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


def missing_config(converter: Any, backbone_cls: type, config: dict[str, Any]) -> dict[str, Any]:
    """The backbone arguments that ``config`` (a Hugging Face ``config.json``) sets and that
    ``converter.convert_backbone_config`` leaves out: ``layer_norm_epsilon``, when the backbone
    takes it and the config names one of :data:`_EPSILON_KEYS`."""
    convert = converter.convert_backbone_config
    if len(inspect.signature(convert).parameters) == 1:
        converted = convert(config)
    else:  # a converter that takes the backbone class too (as keras-hub's loader calls it)
        converted = convert(config, backbone_cls)
    if "layer_norm_epsilon" in converted:
        return {}
    if "layer_norm_epsilon" not in inspect.signature(backbone_cls).parameters:
        return {}
    for key in _EPSILON_KEYS:
        if key in config:
            return {"layer_norm_epsilon": float(config[key])}
    return {}


#: ``config.json`` keys that transformers 5 renamed: ``{the name keras-hub's converters read:
#: transformers 5's}`` (Qwen3-MoE's expert count is ``num_local_experts`` in transformers 5).
_RENAMED_CONFIG = {"num_experts": "num_local_experts"}


def _preset_loader(path: str) -> Any:
    """keras-hub's loader of checkpoint folder ``path``, its config read with the names keras-hub
    0.32's converters expect also for a folder saved by transformers 5 (:data:`_RENAMED_CONFIG`)."""
    from keras_hub.src.utils.preset_utils import get_preset_loader

    loader = get_preset_loader(path)
    config = getattr(loader, "config", None)
    if isinstance(config, dict):
        for old, new in _RENAMED_CONFIG.items():
            if old not in config and new in config:
                config[old] = config[new]
    return loader


def _task_for(converter: Any) -> Any:
    """keras-hub's causal LM task whose backbone is ``converter``'s (``Qwen3MoeCausalLM`` for
    ``convert_qwen3_moe``), None when keras-hub has none."""
    import keras_hub

    wanted = getattr(converter, "backbone_cls", None)
    for name in sorted(dir(keras_hub.models)):
        cls = getattr(keras_hub.models, name)
        if (isinstance(cls, type) and issubclass(cls, keras_hub.models.CausalLM)
                and getattr(cls, "backbone_cls", None) is wanted and wanted is not None):
            return cls
    return None


def load_causal_lm(folder: str | os.PathLike[str], task: Any = None, dtype: str = "float32") -> Any:
    """The Hugging Face checkpoint ``folder`` as a keras-hub causal LM without a preprocessor,
    in ``dtype``. ``task``: the keras-hub task class; by default the one of the folder's model
    type (``config.json`` ``model_type``: ``LlamaCausalLM`` for ``llama``,
    ``Qwen3MoeCausalLM`` for ``qwen3_moe``, ``MixtralCausalLM`` for ``mixtral``). The backbone
    is built by keras-hub's own converter of the folder, with :func:`missing_config`'s
    arguments and the config keys transformers 5 renamed read under their former names, so it
    computes what the checkpoint does. Without keras-hub:
    :class:`~recipe_spec.diagnostics.packages.MissingPackageError` naming the command that
    installs it; a folder keras-hub has no causal LM for: a ValueError naming its model type."""
    from recipe_spec.diagnostics.packages import require

    require("keras_hub", "loading a Hugging Face checkpoint folder as a keras-hub model")
    path = os.fspath(folder)
    loader = _preset_loader(path)
    converter = getattr(loader, "converter", None)
    if task is None:
        task = _task_for(converter)
        if task is None:
            kind = dict(getattr(loader, "config", {}) or {}).get("model_type")
            raise ValueError(f"{path}: keras-hub {_version()} has no causal LM for model type {kind!r}; pass "
                             "task= (a keras_hub.models CausalLM class), or run the recipe on PyTorch")
    extra = missing_config(converter, task.backbone_cls, dict(loader.config)) if converter is not None else {}
    if converter is not None and hasattr(loader, "load_backbone"):
        backbone = loader.load_backbone(task.backbone_cls, True, dtype=dtype, **extra)
    else:
        backbone = task.backbone_cls.from_preset(path, dtype=dtype, **extra)
    model = task(backbone=backbone, preprocessor=None)
    remember_checkpoint(model, path)
    return model


def _version() -> str:
    import keras_hub

    return str(getattr(keras_hub, "__version__", "?"))


#: keras-hub task classes whose Hugging Face architecture is not ``<name>ForCausalLM``.
_ARCHITECTURES = {"Llama3CausalLM": "LlamaForCausalLM", "QwenCausalLM": "Qwen2ForCausalLM",
                  "QwenMoeCausalLM": "Qwen2MoeForCausalLM"}


def hf_architecture(model: Any) -> str | None:
    """The Hugging Face architecture of keras-hub ``model`` (``Qwen3MoeForCausalLM`` for a
    ``Qwen3MoeCausalLM``), which picks llm-compressor's default smoothing mappings: the
    ``architectures`` of the checkpoint it was loaded from where that is known
    (:func:`checkpoint_of`), else its task class's name with ``ForCausalLM``. None for a model
    keras-hub did not build, or a keras-hub model that is no causal LM."""
    if backbone_of(model) is None:
        return None
    folder = checkpoint_of(model)
    if folder is not None:
        try:
            with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
                found = (json.load(f).get("architectures") or [None])[0]
            if isinstance(found, str) and found:
                return found
        except (OSError, ValueError):
            pass
    name = type(model).__name__
    if name in _ARCHITECTURES:
        return _ARCHITECTURES[name]
    return name.removesuffix("CausalLM") + "ForCausalLM" if name.endswith("CausalLM") else None


def remember_checkpoint(model: Any, folder: str | os.PathLike[str]) -> None:
    """Record that keras-hub ``model`` was loaded from the Hugging Face checkpoint ``folder``
    (for a model loaded with keras-hub's own ``from_preset``): the one-shot host then compares
    its backbone with the folder's ``config.json`` (:func:`warn_config_differences`)."""
    backbone = backbone_of(model)
    if backbone is None:
        raise TypeError(f"{type(model).__name__} is not a keras-hub model: no backbone to compare with {folder}")
    for key in [k for k, (ref, _) in _LOADED_FROM.items() if ref() is None]:
        del _LOADED_FROM[key]
    _LOADED_FROM[id(backbone)] = (weakref.ref(backbone), os.fspath(folder))


#: ``id(backbone): (weak reference, folder)`` of the backbones :func:`load_causal_lm` loaded.
_LOADED_FROM: dict[int, tuple[Any, str]] = {}


def checkpoint_of(model: Any) -> str | None:
    """The Hugging Face checkpoint folder keras-hub ``model`` was loaded from, where that can
    be told: a model of :func:`load_causal_lm` or one given to :func:`remember_checkpoint`;
    None otherwise (keras-hub 0.32's ``from_preset`` keeps no trace of its folder in the
    model: its tokenizer holds the vocabulary, not the file it came from)."""
    backbone = backbone_of(model)
    if backbone is None:
        return None
    entry = _LOADED_FROM.get(id(backbone))
    if entry is not None and entry[0]() is backbone:
        return entry[1]
    return None


def config_differences(model: Any, folder: str | os.PathLike[str]) -> list[tuple[str, Any, str, Any]]:
    """``(backbone argument, its value, config.json key, the config's value)`` for each
    argument :func:`missing_config` reads from ``folder``'s ``config.json`` that keras-hub
    ``model``'s backbone holds with another value ([] when they agree or keras-hub's converter
    carries every one)."""
    backbone = backbone_of(model)
    loader = _preset_loader(os.fspath(folder))
    converter = getattr(loader, "converter", None)
    if backbone is None or converter is None:
        return []
    config = dict(loader.config)
    out = []
    for argument, wanted in missing_config(converter, type(backbone), config).items():
        held = getattr(backbone, argument, None)
        if held is not None and float(held) != float(wanted):
            key = next((k for k in _EPSILON_KEYS if k in config), argument)
            out.append((argument, held, key, wanted))
    return out


def warn_config_differences(model: Any) -> list[tuple[str, Any, str, Any]]:
    """Log a warning per :func:`config_differences` of keras-hub ``model`` and the folder
    :func:`checkpoint_of` finds, naming the field and the fix; returns them."""
    folder = checkpoint_of(model)
    if folder is None:
        return []
    try:
        found = config_differences(model, folder)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # the folder changed since: nothing to compare
        _LOG.info("the checkpoint folder %s of the keras-hub model could not be read: %s", folder, exc)
        return []
    for argument, held, key, wanted in found:
        _LOG.warning("the keras-hub backbone runs with %s=%g, but its checkpoint's config.json (%s) sets %s: %g "
                     "(keras-hub's from_preset leaves it out); its outputs differ from the checkpoint's own: "
                     "load the folder with recipe_spec_keras.hub.load_causal_lm(%r)",
                     argument, held, folder, key, wanted, folder)
    return found
