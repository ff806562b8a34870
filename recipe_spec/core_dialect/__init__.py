"""The core (stage/group) recipe dialect of SparseML 1.6-1.9 and llm-compressor:
its tool versions, modifier catalogue and a pure argument checker.

>>> from recipe_spec.core_dialect import Compat, check_modifier
>>> [(p.kind, p.severity, p.versions) for p in check_modifier(
...     "GPTQModifier", {"scheme": "W4A16", "sequential_update": False}, None) if p.path]
[('removed_arg', 'warning', 'llm-compressor ≥0.8')]
>>> [p.kind for p in check_modifier("GPTQModifier", {"sequential_update": False},
...                                 Compat.parse("llmcompressor==0.8"))]
['removed_arg']
"""

from .arg_check import Problem, check_modifier
from .catalogue import core_names, core_spec, core_specs, core_variants
from .spec import CoreSpec, Deprecation, Renamed, Translation
from .versions import Compat, Version, summarize, versions_where

__all__ = [
    "Compat", "Version", "versions_where", "summarize",
    "CoreSpec", "Renamed", "Deprecation", "Translation",
    "core_specs", "core_spec", "core_variants", "core_names",
    "Problem", "check_modifier",
]
