"""A model's parameters, framework-free: neutral records (:mod:`.records`), ``re:`` patterns
compiled to linear-time matchers (:mod:`.patterns`), resolving a modifier's ``params`` selectors
(:mod:`.selectors`), manifests (:mod:`.manifest`), model specs (:mod:`.model_spec`) and
checkpoint headers (:mod:`.checkpoint`).

>>> records = [ParamRecord("fc1.weight", (4, 8), "Linear", True), ParamRecord("fc1.bias", (4,), "Linear", False)]
>>> resolve("__ALL_PRUNABLE__", records).names
('fc1.weight',)
"""

from ..text.patterns import MAX_STATES, LinearPattern, PatternError, compile_pattern
from .manifest import read_manifest, write_manifest
from .records import MANIFEST_VERSION, TOKENS, ParamRecord, portable_alias
from .selectors import (
    ModelParams,
    ParamIndex,
    Resolution,
    closest_names,
    compile_selectors,
    resolve,
    selector_items,
)

__all__ = [
    "ParamRecord", "Resolution", "PatternError", "TOKENS", "resolve", "compile_selectors", "ParamIndex",
    "compile_pattern", "LinearPattern", "MAX_STATES", "closest_names", "selector_items", "portable_alias",
    "read_manifest", "write_manifest", "MANIFEST_VERSION", "ModelParams",
]
