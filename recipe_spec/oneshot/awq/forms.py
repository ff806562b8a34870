"""AWQModifier's older forms in llm-compressor's releases: the combined form run as the release
that had it ran it, where ``oneshot(compat=...)`` names such a release and recipe-spec has a
faithful run of it (0.9, 0.10); refused otherwise, with the rewrite to the form of 0.11 and
later.

- **0.5.1** (AWQ's first release): a transform that searched with a grid of its own,
  ``num_bits`` (4), ``group_size`` (128) and ``symmetric`` (false), round to nearest on integer
  groups, whatever the QuantizationModifier after it then quantized with
  (:data:`OWN_GRID`; also ``max_chunk_memory``, a chunk size with no effect on the result).
- **0.5.2 to 0.10**: AWQ quantizes itself (:data:`COMBINED`, ``QuantizationMixin``'s
  arguments: ``scheme``/``config_groups`` with ``targets``, ``ignore``, ...). It attaches that
  scheme, searches each mapping with its weight grid, smooths, and at its end computes every
  targeted weight's scale and zero point from the smoothed weight with the scheme's observer
  (round to nearest, as a QuantizationModifier does). Up to 0.9 its ``ignore`` also kept the
  layers it names out of the mappings; from 0.10 a mapping is skipped only when none of its
  layers is quantized.
- **0.11 and later**: a transform without quantization arguments, followed by a
  QuantizationModifier or GPTQModifier whose weight grid it searches with
  (:mod:`.smoothing_args`).

The 0.5.2-0.10 form is the 0.11 form's AWQModifier followed by a QuantizationModifier with the
same quantization arguments (:func:`split_form` writes that pair), searched as the release
searched (:mod:`recipe_spec.oneshot.awq.releases`): under ``compat`` 0.9 or 0.10,
``oneshot()`` runs it so (:func:`combined_args` gives the arguments the QuantizationModifier
takes); before 0.9 the search itself differed and the form is refused.
"""

from __future__ import annotations

from typing import Any

from ...diagnostics import codes
from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ...recipe.serialize import dump_value
from .releases import AwqRelease

__all__ = ["COMBINED", "OWN_GRID", "split_form", "older_awq_form", "combined_args"]

#: QuantizationMixin's arguments, on AWQModifier in llm-compressor 0.5.2 to 0.10.
COMBINED = ("config_groups", "targets", "ignore", "scheme", "kv_cache_scheme", "weight_observer",
            "input_observer", "output_observer", "observer", "bypass_divisibility_checks")
#: AWQModifier's own search grid in llm-compressor 0.5.1, and its chunk size.
OWN_GRID = ("num_bits", "group_size", "symmetric", "max_chunk_memory")


def split_form(m: Modifier) -> str:
    """The 0.11 form of a 0.5.2-0.10 AWQModifier ``m``: the AWQModifier without its
    quantization arguments, then a QuantizationModifier with them, as YAML under the same
    ``<group>_modifiers`` key.

    >>> from recipe_spec import load
    >>> r = load("q_stage:\\n  q_modifiers:\\n    AWQModifier:\\n      scheme: W4A16\\n      targets: [Linear]\\n")
    >>> print(split_form(r.modifiers[0]), end="")
    AWQModifier: {}
    QuantizationModifier:
      scheme: W4A16
      targets:
      - Linear
    """
    raw = dict(m.raw_args)
    moved = {k: v for k, v in raw.items() if k in COMBINED}
    kept = {k: v for k, v in raw.items() if k not in COMBINED}
    return dump_value({m.type: kept}) + dump_value({"QuantizationModifier": moved})


def _present(args: Any, keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if k in args]


def combined_args(m: Modifier) -> dict[str, Any]:
    """The quantization arguments of a combined-form AWQModifier ``m`` (empty: none)."""
    return {k: m.args[k] for k in COMBINED if k in m.raw_args}


def older_awq_form(recipe: Recipe, m: Modifier, errors: list[Diagnostic],
                   release: AwqRelease | None = None, label: str = "") -> set[str]:
    """A located B001 in ``errors`` for AWQModifier ``m`` written in an older form (see the
    module docstring), with the rewrite; the argument names it covers (none: the 0.11 form).
    ``release``: how the release the run follows (``label``, e.g. ``llm-compressor 0.8``) ran
    AWQ; None where recipe-spec has no faithful run of it. A combined form is run, not
    refused, where that release took it."""
    combined = _present(m.raw_args, COMBINED)
    grid = _present(m.raw_args, OWN_GRID)
    if combined and release is not None and release.combined:
        combined = []
    elif combined and release is None:
        errors.append(codes.B001(
            f"AWQModifier's combined form as {label or 'this release'} ran it is not run by recipe_spec.oneshot: "
            "its search differed from 0.9's and later (mapping resolution, the fake quantization in the search); "
            "recipe_spec.oneshot runs the combined form as llm-compressor 0.9 and 0.10 ran it, and the form of "
            "0.11 and later",
            "Run it with compat llmcompressor==0.10 (the same arguments), or write the form of 0.11:\n"
            + split_form(m), m.span).in_file(recipe.path))
        combined = []
    if combined:
        listed = ", ".join(f"`{k}`" for k in combined)
        errors.append(codes.B001(
            f"AWQModifier with {listed} is llm-compressor 0.5.2-0.10's combined form: AWQ smooths, then "
            "quantizes those layers itself (round to nearest); recipe_spec.oneshot runs the form of 0.11 "
            "and later, AWQ followed by a QuantizationModifier with those arguments",
            "Run it as llm-compressor 0.10 did with oneshot(..., compat='llmcompressor==0.10') (`--compat "
            "llmcompressor==0.10` on the command line; 0.9 also runs it), or write the form of 0.11 and "
            "later, whose search grid is 0.11's (`recipe-spec convert RECIPE --to llmcompressor` writes it):\n"
            + split_form(m),
            m.span).in_file(recipe.path))
    if grid:
        listed = ", ".join(f"`{k}`" for k in grid)
        errors.append(codes.B001(
            f"AWQModifier {listed}: llm-compressor 0.5.1's own search grid; from 0.5.2 AWQ searches with "
            "the weight grid of the quantization it is given, and recipe_spec.oneshot runs that form",
            "Remove them and give the QuantizationModifier after AWQ the weights it should search with, "
            "e.g. {num_bits: 4, type: int, symmetric: false, strategy: group, group_size: 128} (0.5.1's "
            "defaults); the run is 0.5.1's only where that is the grid the QuantizationModifier quantizes "
            "with.", m.key_span(grid[0])).in_file(recipe.path))
    return set(_present(m.raw_args, COMBINED)) | set(grid)
