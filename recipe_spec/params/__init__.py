"""A model's parameters, framework-free: neutral records, resolving a modifier's ``params``
selectors against them, manifests, model specs and checkpoint headers.
"""

from .selectors import (
    MANIFEST_VERSION,
    MAX_STATES,
    TOKENS,
    LinearPattern,
    ParamIndex,
    ParamRecord,
    PatternError,
    Resolution,
    closest_names,
    compile_pattern,
    compile_selectors,
    portable_alias,
    read_manifest,
    resolve,
    selector_items,
    write_manifest,
)

__all__ = [
    "ParamRecord",
    "Resolution",
    "PatternError",
    "TOKENS",
    "resolve",
    "compile_selectors",
    "ParamIndex",
    "compile_pattern",
    "LinearPattern",
    "MAX_STATES",
    "closest_names",
    "selector_items",
    "portable_alias",
    "read_manifest",
    "write_manifest",
    "MANIFEST_VERSION",
]
