"""compressed-tensors modelled once, framework-free: its structures field by field and release
by release (:mod:`.fields`), its preset schemes with the releases that have them and their
contents (:mod:`.presets`), and a recipe's ``scheme`` / ``config_groups`` resolved into the
quantization config llm-compressor builds (:mod:`.config`). Target matching (``re:`` patterns,
names, class names) is :func:`recipe_spec.text.targets.target_matches`. The validator
(:mod:`recipe_spec.stage_dialect.quant_args`), the grid (:mod:`recipe_spec.quantization`) and the
one-shot runs read these; the tests compare them with compressed-tensors itself."""

from __future__ import annotations

from .config import ActivationArgs, complete_args, is_preset, preset_activations, resolve_config
from .fields import ARGS_FIELDS, SCHEME_FIELDS, QuantField
from .presets import PRESET_SCHEMES, PRESETS, UNSUPPORTED_PRESETS, Preset

__all__ = [
    "ARGS_FIELDS", "SCHEME_FIELDS", "QuantField", "PRESETS", "Preset", "PRESET_SCHEMES", "UNSUPPORTED_PRESETS",
    "resolve_config", "complete_args", "is_preset", "preset_activations", "ActivationArgs",
]
