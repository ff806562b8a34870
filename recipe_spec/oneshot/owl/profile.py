"""Per-layer sparsities of SparseGPTModifier and WandaPruningModifier: a ``sparsity`` list, or
the OWL profile (``sparsity_profile: owl`` with ``owl_m`` and ``owl_lmbda``), as llm-compressor
computes and assigns them (``sgpt_base.py``).

- **A list** holds one value per module the modifier's ``targets`` match (in ``named_modules``
  order, ``ignore`` not applied): value *i* goes to every prunable layer inside match *i*
  (a layer inside two matches takes the later one). With ``targets`` naming the decoder layers
  (``re:model\\.layers\\.\\d+$`` or their class) that is one value per decoder layer; with
  ``targets: [Linear]``, one per Linear, ``lm_head`` included. Any other length is refused
  before a weight changes.
- **OWL** (Outlier Weighed Layerwise sparsity): one pass of the whole, still uncompressed model
  over the calibration set, before any modifier compresses, gives every Linear inside a
  repeated block ``a = Σ_batches ‖x_j‖₂ / 128`` (per input feature ``j``, the norm over the
  batch's tokens; llm-compressor's ``_get_activations``). Per block, ``z = |W|·a`` over every
  prunable layer in it, concatenated; its outlier ratio is ``100·#{z > owl_m·mean(z)} / #z``.
  Ratios are scaled to ``[0, 2·owl_lmbda]`` (``(r - min) / (max - min) · 2·owl_lmbda``) and
  block *k*'s sparsity is ``1 - (r_k - mean(r) + 1 - sparsity)``: the mean stays ``sparsity``,
  blocks with more outliers are pruned less. Each layer inside block *k* is pruned to it;
  a target outside every block (``lm_head`` when not ignored) keeps ``sparsity``.

llm-compressor 0.14 itself stops before pruning with either (README of
``tests/fixtures/owl``; ``validate`` says so, C007); recipe-spec runs what its code computes.

>>> [round(s, 4) for s in owl_sparsities([2.0, 6.0, 4.0], 0.5, 0.08)]
[0.58, 0.42, 0.5]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...diagnostics import codes
from ...diagnostics.base import Diagnostic, RecipeError
from ..distributed import added_in_order
from ..host import CalibrationHost, ModuleInfo, inside

__all__ = ["read_sparsity", "owl_sparsities", "ActivationNorms", "outlier_ratio", "layer_sparsities"]

#: llm-compressor's ``_get_activations(nsamples=128)``: each batch's norm is divided by 128
#: whatever the sample count (no effect on the ratios, kept for the same rounding).
_NSAMPLES = 128


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_sparsity(args: Mapping[str, Any]) -> tuple[float, tuple[float, ...], tuple[int, float] | None] | None:
    """``(sparsity, per-match list, (owl_m, owl_lmbda) or None)`` from a modifier's arguments;
    None when ``sparsity`` is neither a number nor a list of numbers. A profile other than
    ``owl`` or an incomplete trio is the validator's (M003, M006); it reads as no profile here."""
    value: Any = args.get("sparsity")
    listed: tuple[float, ...] = ()
    if isinstance(value, (list, tuple)) and value and all(_number(v) for v in value):
        listed = tuple(float(v) for v in value)
    elif not _number(value):
        return None
    profile = args.get("sparsity_profile")
    m: Any = args.get("owl_m")
    lmbda: Any = args.get("owl_lmbda")
    owl = None
    if isinstance(profile, str) and profile.lower() == "owl" and _number(m) and _number(lmbda) and not listed:
        owl = (int(m), float(lmbda))
    return (0.0 if listed else float(value)), listed, owl


def owl_sparsities(ratios: Sequence[float], sparsity: float, lmbda: float) -> list[float]:
    """Each block's sparsity from its outlier ratio (percent), llm-compressor's float64 maths.
    Raises ValueError when the ratios are all equal (llm-compressor divides by zero)."""
    low, high = min(ratios), max(ratios)
    if high == low:
        raise ValueError(f"every block has the same outlier ratio ({low:.4g}%), so OWL's scaling "
                         "divides by zero (llm-compressor gives NaN sparsities)")
    scaled = [(r - low) * (1 / (high - low) * lmbda * 2) for r in ratios]
    mean = sum(scaled) / len(scaled)
    return [1 - (s - mean + (1 - float(sparsity))) for s in scaled]


class ActivationNorms:
    """OWL's activation statistic of one layer: ``Σ_calls ‖x_j‖₂ / 128`` per input feature,
    fed ``[tokens, in]`` float32 inputs (one call per batch, as llm-compressor's hook)."""

    def __init__(self, ops: Any) -> None:
        self._ops = ops
        self.value: Any = None

    def add(self, x: Any, sequences: int = 1) -> None:
        """Add one forward call's input (``sequences`` is not used: the norm is per call)."""
        del sequences
        ops = self._ops
        norms = ops.sqrt(ops.sum(x * x, 0)) * (1.0 / _NSAMPLES)
        self.value = norms if self.value is None else self.value + norms

    #: Over several processes the sums are added (a ratio of outliers does not follow the last
    #: bit); ``distributed_statistics="relay"`` adds them in the one process's order.
    relayed = False

    def state(self) -> tuple[list[Any], list[Any]]:
        """The running sum (:meth:`set_state`)."""
        return [], [self.value]

    def set_state(self, arrays: list[Any], state: list[Any]) -> None:
        """Continue from another statistic's :meth:`state` (of the same layer), bit for bit."""
        del arrays
        self.value = state[0]

    def combine(self, collective: Any) -> None:
        """The sum over every process's calls, added in rank order (``collective``: a
        :class:`~..distributed.Collective`)."""
        self.value = added_in_order(self.value, collective)


def outlier_ratio(ops: Any, pairs: Sequence[tuple[Any, Any]], owl_m: int) -> float:
    """The outlier ratio (percent) of one block: ``pairs`` of (weight ``(out, in)``, its
    activation norms ``(in,)``)."""
    scores = [ops.abs(w) * ops.reshape(a, (1, -1)) for w, a in pairs]
    total = sum(int(s.shape[0]) * int(s.shape[1]) for s in scores)
    threshold = sum(ops.sum_all(s) for s in scores) / total * owl_m
    return 100 * sum(ops.count_nonzero(s > threshold) for s in scores) / total


def _error(mod: Any, code: Any, message: str, hint: str, key: str = "sparsity") -> RecipeError:
    span = mod.entry.key_span(key) if key in mod.entry.args else mod.entry.span
    diagnostic: Diagnostic = code(message, hint, span).in_file(mod.entry.file)
    return RecipeError([diagnostic])


def _listed(mod: Any, roots: Sequence[str], names: Sequence[str]) -> dict[str, float]:
    if len(roots) != len(mod.sparsities):
        shown = ", ".join(roots[:4]) + (", ..." if len(roots) > 4 else "")
        raise _error(mod, codes.M005, (
            f"{mod.type} sparsity has {len(mod.sparsities)} values but its targets "
            f"{list(mod.targets)} match {len(roots)} modules of this model ({shown}); llm-compressor "
            "gives value i to every layer inside match i"), (
            f"Write {len(roots)} values, or set targets to the decoder layers (e.g. "
            "['re:model\\.layers\\.\\d+$']) for one value per layer."))
    out: dict[str, float] = {}
    for root, value in zip(roots, mod.sparsities, strict=True):
        out.update({n: value for n in names if inside(n, root)})
    return out


def layer_sparsities(host: CalibrationHost, modules: Sequence[ModuleInfo], mods: Sequence[Any],
                     selected: Sequence[Sequence[str]], roots: Sequence[Sequence[str]], blocks: Sequence[str],
                     batches: Sequence[Any] | None,
                     calibrate: Callable[[dict[str, Any], Callable[[], Any]], None] | None = None,
                     ) -> list[dict[str, float]]:
    """Per modifier, the sparsity of each module it ``selected`` that has one of its own (empty
    for a single ``sparsity``); ``roots``: per modifier, the modules its ``targets`` match.
    OWL runs its statistics pass here, before any weight changes: ``calibrate(stats, run)``
    runs the pass and joins the statistics over processes (``batches``: this process's
    share; default: the pass alone). A list of the wrong length, a model without repeated
    blocks and OWL sparsities outside ``[0, 1)`` are located errors."""
    out: list[dict[str, float]] = [_listed(m, r, n) if m.sparsities else {}
                                   for m, r, n in zip(mods, roots, selected, strict=True)]
    owl = [i for i, m in enumerate(mods) if m.owl is not None]
    if not owl:
        return out
    if len(blocks) < 2:
        raise _error(mods[owl[0]], codes.B001, (
            f"{mods[owl[0]].type} with sparsity_profile owl needs the model's repeated blocks, and "
            f"{'none was' if not blocks else 'only one (' + blocks[0] + ') was'} found"),
            "Pass sequential_targets= (the decoder layer class), or drop the OWL arguments.",
            "sparsity_profile")
    layers = {b: [i.name for i in modules if i.prunable and inside(i.name, b)] for b in blocks}
    norms = {n: ActivationNorms(host.ops) for names in layers.values() for n in names}
    def run() -> None:
        host.run_model(batches or [], {n: s.add for n, s in norms.items()})

    if calibrate is None:
        run()
    else:
        calibrate(norms, run)
    weights = {n: host.weight(n) for n in norms}
    for i in owl:
        mod = mods[i]
        owl_m, lmbda = mod.owl
        ratios = [outlier_ratio(host.ops, [(weights[n], norms[n].value) for n in layers[b]], owl_m) for b in blocks]
        try:
            levels = owl_sparsities(ratios, mod.sparsity, lmbda)
        except ValueError as exc:
            raise _error(mod, codes.B001, f"{mod.type}: {exc}", "Drop the OWL arguments (one sparsity "
                         "for every layer) or calibrate on more data.", "sparsity_profile") from None
        bad = [(b, s) for b, s in zip(blocks, levels, strict=True) if not 0 <= s < 1]
        if bad:
            raise _error(mod, codes.M005, (
                f"OWL gives {bad[0][0]} sparsity {bad[0][1]:.4g}, outside [0, 1) (sparsity "
                f"{mod.sparsity:g}, owl_lmbda {lmbda:g})"),
                "Lower owl_lmbda so that sparsity ± owl_lmbda stays within [0, 1).", "owl_lmbda")
        for block, level in zip(blocks, levels, strict=True):
            out[i].update({n: level for n in selected[i] if inside(n, block)})
    return out
