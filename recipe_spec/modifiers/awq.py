"""``llmcompressor.modifiers.awq`` under the same path: its ``AWQModifier(**kwargs)`` is the
deprecated shim that splits the pre-0.11 combined form into the AWQ transform and a
``QuantizationModifier`` (the quantization keywords go to the latter), as llm-compressor 0.14's
does; ``recipe_spec.modifiers.transform.awq.AWQModifier`` is the transform itself.

>>> AWQModifier(scheme="W4A16_ASYM", targets=["Linear"], duo_scaling="both")
[AWQModifier(duo_scaling='both'), QuantizationModifier(scheme='W4A16_ASYM', targets=['Linear'])]
"""

from __future__ import annotations

import warnings
from typing import Any

from .objects import AWQMapping, ModifierObject
from .objects import AWQModifier as _Transform
from .objects import QuantizationModifier as _Quantization

__all__ = ["AWQModifier", "AWQMapping"]

#: The keywords llm-compressor 0.14's shim hands to the QuantizationModifier.
QUANT_KEYS = ("config_groups", "targets", "ignore", "scheme", "kv_cache_scheme", "weight_observer", "input_observer",
              "output_observer", "observer", "bypass_divisibility_checks")


def AWQModifier(**kwargs: Any) -> list[ModifierObject]:  # noqa: N802 - llm-compressor's name
    """The AWQ transform and a QuantizationModifier (see the module docstring), with
    llm-compressor's DeprecationWarning."""
    warnings.warn("`recipe_spec.modifiers.awq.AWQModifier` is deprecated, as llm-compressor's: import it from "
                  "recipe_spec.modifiers.transform.awq and add a QuantizationModifier", DeprecationWarning,
                  stacklevel=2)
    quant = {k: v for k, v in kwargs.items() if k in QUANT_KEYS}
    return [_Transform(**{k: v for k, v in kwargs.items() if k not in QUANT_KEYS}), _Quantization(**quant)]
