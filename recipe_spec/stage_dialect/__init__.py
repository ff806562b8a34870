"""The stage/group recipe dialect of SparseML 1.6-1.9 and llm-compressor:
its tool versions, modifier catalogue and a pure argument checker.

>>> from recipe_spec.stage_dialect import Compat, check_modifier
>>> [(p.kind, p.severity, p.versions) for p in check_modifier(
...     "GPTQModifier", {"scheme": "W4A16", "sequential_update": False}, None) if p.path]
[('removed_arg', 'warning', 'llm-compressor ≥0.8')]
>>> [p.kind for p in check_modifier("GPTQModifier", {"sequential_update": False},
...                                 Compat.parse("llmcompressor==0.8"))]
['removed_arg']
"""

from .arg_check import Problem, check_modifier
from .catalogue import all_stage_names, stage_spec, stage_specs, stage_variants
from .spec import Deprecation, Renamed, StageSpec, Translation
from .versions import Compat, Version, summarize, versions_where

__all__ = [
    "Compat", "Version", "versions_where", "summarize",
    "StageSpec", "Renamed", "Deprecation", "Translation",
    "stage_specs", "stage_spec", "stage_variants", "all_stage_names",
    "Problem", "check_modifier",
]
