"""How AWQ ran in each llm-compressor release, where it differs from 0.14's
(``modifiers/awq/base.py`` at the release tags; checked against 0.9.0.2's and 0.10.0.3's own
runs in ``tests/fixtures/smoothing/combined.json``).

- **0.11 to 0.14** (:data:`CURRENT`): the grid of :func:`recipe_spec.oneshot.awq.search.grid`
  (ratios ``i / (n - 1)``, with duo scaling the identity first); AWQ is a transform and searches
  with the grid of the quantization modifiers after it.
- **0.10**: ratios ``i / n`` for ``i`` in ``range(n)`` (1.0 never reached, no identity point
  with duo scaling; ``both``: ``n_grid // 2`` ratios, each without then with duo scaling); AWQ
  quantizes with its own arguments (the combined form), and a mapping none of whose layers
  those arguments quantize is skipped.
- **0.9**: 0.10's grid, and three more differences: the mean ``|x|`` of the first forward
  call is kept as a sum (``_accumulate_mean`` returns ``sum`` on its first call), so the mean
  is ``(n1 · sum1 + sum2 + ... ) / N`` with ``n1`` the first call's tokens; the loss is the
  sum over calls of each call's mean squared error, divided by the total number of outputs;
  and the modifier's ``ignore`` removes the layers it names from the mappings (compressed-
  tensors' ``match_modules_set`` with ``ignore``: a mapping that loses a layer in a decoder
  layer fails with "Found a final incomplete set"). Every mapping is searched, quantized
  layers or not.
- **0.5.1 to 0.8**: no faithful run (:func:`awq_release` gives None): 0.5.1 searched with a
  grid of its own; 0.5.2-0.8 resolved mappings another way (under the smooth layer's parent,
  the balance layer itself as the parent of a single-layer mapping; #2070 in 0.9 moved to
  ``match_modules_set``) and fake-quantized in the search with their own
  ``_pseudo_quantize_tensor`` (#1961 in 0.9 moved to the scheme's observer); 0.5.2-0.7 also
  took ``|x|`` before #1788's fix for negative activations.

>>> awq_release((0, 10)).grid_to_one, awq_release((0, 14)).grid_to_one, awq_release((0, 8))
(False, True, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AwqRelease", "CURRENT", "awq_release", "COMBINED_RELEASES"]


@dataclass(frozen=True)
class AwqRelease:
    """The differences of one release's AWQ from 0.14's (see the module docstring)."""

    label: str
    #: ratios ``i / (n - 1)`` and the identity first with duo scaling (0.11+), else ``i / n``
    grid_to_one: bool = True
    #: the first forward call's ``|x|`` kept as a sum (0.9 and before)
    first_call_sum: bool = False
    #: the loss is the sum of each call's mean over the total count (0.9 and before)
    loss_per_call: bool = False
    #: ``ignore`` removes layers from the mappings (0.9 and before)
    ignore_in_mappings: bool = False
    #: a mapping none of whose layers is quantized is skipped (0.10 and later)
    skip_unquantized: bool = True
    #: AWQ takes the quantization arguments itself (0.5.2 to 0.10)
    combined: bool = False


CURRENT = AwqRelease("llm-compressor 0.11 and later")
_RELEASES = {
    (0, 10): AwqRelease("llm-compressor 0.10", grid_to_one=False, combined=True),
    (0, 9): AwqRelease("llm-compressor 0.9", grid_to_one=False, first_call_sum=True, loss_per_call=True,
                       ignore_in_mappings=True, skip_unquantized=False, combined=True),
}
#: The releases whose AWQModifier took the quantization arguments (the catalogue's minor
#: release 0.5 holds 0.5.2, the first of them).
COMBINED_RELEASES = ">=0.5,<0.11"


def awq_release(version: Sequence[int] | None) -> AwqRelease | None:
    """How llm-compressor ``version`` (``(0, 10)``; None: the newest) ran AWQ; None where
    ``recipe_spec.oneshot`` has no faithful run of it (before 0.9)."""
    if version is None or tuple(version[:2]) >= (0, 11):
        return CURRENT
    return _RELEASES.get((int(version[0]), int(version[1])))
