"""A second-order modifier's arguments, read once: both M-FAC spellings (the seed tutorial's
``mfac_options: {num_grads, fisher_block_size, available_gpus}`` and SparseML 1.8's flat
keys), SparseML's defaults (from the declarations), the ``num_grads`` rule, and what the recipe
alone shows cannot run (:func:`static_findings`, M009/M012).

>>> from recipe_spec import loads
>>> from recipe_spec.modifiers import spec
>>> m = loads('''
... modifiers:
...   - !MFACPruningModifier
...     params: __ALL_PRUNABLE__
...     init_sparsity: 0.05
...     final_sparsity: 0.85
...     start_epoch: 1.0
...     end_epoch: 61.0
...     update_frequency: 4.0
...     mfac_options:
...       num_grads: {0.0: 256, 0.5: 512, 0.75: 1024, 0.83: 1400}
...       fisher_block_size: 10000
...       available_gpus: ["cuda:0"]
... ''').modifiers[0]
>>> s = settings_for(m, defaults_of(spec(m.type)))
>>> s.block_size, s.devices, s.grads_for(0.0), s.grads_for(0.3), s.grads_for(0.9)
(10000, ('cuda:0',), 256, 512, 1400)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..diagnostics import codes
from ..recipe.findings import Finding
from .spec import ModifierSpec

if TYPE_CHECKING:
    from ..recipe.model import Modifier

__all__ = [
    "SecondOrderSettings", "settings_for", "defaults_of", "grads_for_sparsity", "static_findings", "arg_key",
    "EPS_F32", "MFAC_MASK_TYPES",
]

#: ``torch.finfo(torch.float32).eps``: OBS adds it to ``2·diag`` (and ``diag``) whatever the dtype.
EPS_F32 = 1.1920928955078125e-07
#: The mask types M-FAC and OBS rank with their scores.
MFAC_MASK_TYPES = ("unstructured", "block4")


def defaults_of(declared: ModifierSpec) -> dict[str, Any]:
    """The declared default of every argument of ``declared`` that has one (its declaration
    in :mod:`recipe_spec.modifiers.second_order` is the one place they live)."""
    return {a.name: a.default for a in declared.args if "default" in a.schema}


def grads_for_sparsity(num_grads: int | tuple[tuple[float, int], ...], sparsity: float) -> int:
    """How many gradients to use at mask sparsity ``sparsity`` (the fraction of zeros of all
    the modifier's masks together). An int is used as is; for a ``{threshold: count}`` table
    SparseML 1.8's rule: the count of the smallest threshold at or above ``sparsity``, the
    largest threshold's count beyond it. ``{0: 4, 0.3: 6, 0.5: 9}``: 4 at 0, 6 up to 0.3,
    9 above.

    >>> table = ((0.0, 4), (0.3, 6), (0.5, 9))
    >>> [grads_for_sparsity(table, s) for s in (0.0, 0.2, 0.3, 0.31, 0.9)]
    [4, 6, 6, 9, 9]
    """
    if isinstance(num_grads, int):
        return num_grads
    for threshold, count in num_grads:
        if threshold >= sparsity:
            return count
    return num_grads[-1][1]


@dataclass(frozen=True)
class SecondOrderSettings:
    """What a second-order modifier asks for, defaults filled in (SparseML 1.8's)."""

    kind: str  # "mfac" or "obs"
    num_grads: int | tuple[tuple[float, int], ...]
    damp: float
    block_size: int | None
    global_sparsity: bool
    mask_type: str
    devices: tuple[str, ...] | None = None  # None: CUDA when present, else the CPU
    grads_device: str | int = "cpu"  # an int is a CUDA index
    num_pages: int = 1
    use_gradient_buffering: bool | None = None
    grad_sampler_kwargs: Mapping[str, Any] | None = None
    num_recomputations: int = 1

    def grads_for(self, sparsity: float) -> int:
        """The number of gradients at mask sparsity ``sparsity`` (:func:`grads_for_sparsity`)."""
        return grads_for_sparsity(self.num_grads, sparsity)

    @property
    def max_grads(self) -> int:
        """The most gradients any sparsity asks for."""
        return self.num_grads if isinstance(self.num_grads, int) else max(c for _, c in self.num_grads)

    def samples(self, has_sampler: bool, oneshot: bool = False) -> bool:
        """Whether gradients come from a grad sampler (else: the training steps' own, or
        one-shot, the gradients the model holds). One-shot uses a given sampler always."""
        if self.kind == "obs" or (oneshot and has_sampler):
            return True
        if self.use_gradient_buffering is True:
            return False
        return has_sampler or self.use_gradient_buffering is False


def _num_grads(value: Any) -> int | tuple[tuple[float, int], ...]:
    if isinstance(value, Mapping):
        return tuple(sorted((float(k), int(v)) for k, v in value.items()))
    return int(value)


def settings_for(m: Modifier, defaults: Mapping[str, Any]) -> SecondOrderSettings:
    """The settings of an ``MFACPruningModifier`` or ``OBSPruningModifier`` (arguments already
    checked by the schema; ``defaults``: :func:`defaults_of` its declaration). ``mfac_options``
    means the flat arguments; ``available_gpus`` is ``available_devices``."""
    if m.type == "OBSPruningModifier":
        args = {**defaults, **m.args}
        return SecondOrderSettings(
            kind="obs", num_grads=int(args["num_grads"]), damp=float(args["damp"]),
            block_size=int(args["fisher_block_size"]), global_sparsity=bool(args["global_sparsity"]),
            mask_type=str(args["mask_type"]), grad_sampler_kwargs=args.get("grad_sampler_kwargs"),
            num_recomputations=int(args["num_recomputations"]),
        )
    flat = dict(m.args)
    options = flat.pop("mfac_options", None) or {}
    flat.update(options)
    if "available_gpus" in flat:
        flat["available_devices"] = flat.pop("available_gpus")
    args = {**defaults, **flat}
    devices = args.get("available_devices")
    block = args["fisher_block_size"]
    return SecondOrderSettings(
        kind="mfac", num_grads=_num_grads(args["num_grads"]), damp=float(args["damp"]),
        block_size=int(block) if block else None, global_sparsity=bool(args["global_sparsity"]),
        mask_type=str(args["mask_type"]) if not isinstance(args["mask_type"], str) else args["mask_type"],
        devices=tuple(str(d) for d in devices) if devices is not None else None,
        grads_device=_device(args["grads_device"]), num_pages=int(args["num_pages"]),
        use_gradient_buffering=args.get("use_gradient_buffering"),
        grad_sampler_kwargs=args.get("grad_sampler_kwargs"),
    )


def _device(value: Any) -> str | int:
    """``grads_device`` as written: a CUDA index stays an int (``0`` is ``cuda:0``, not the
    device string ``"0"``), anything else is its text."""
    return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


def static_findings(m: Modifier, defaults: Mapping[str, Any]) -> Iterator[Finding]:
    """What the recipe alone shows (``validate`` reports these too): a mask type or paging
    M-FAC cannot run, a ``num_grads`` table without 0.0."""
    s = settings_for(m, defaults)
    if s.kind == "mfac" and s.mask_type not in MFAC_MASK_TYPES:
        yield Finding(codes.M012, f"M-FAC scores rank single weights or groups of 4; mask_type {s.mask_type!r} is not supported",
                      "Use mask_type unstructured or block4.", m, arg_key(m, "mask_type"))
    if s.kind == "mfac" and s.global_sparsity and s.mask_type != "unstructured":
        yield Finding(codes.M012, f"M-FAC with global_sparsity ranks single weights; mask_type {s.mask_type!r} needs layer-wise pruning",
                      "Set global_sparsity: false, or mask_type: unstructured.", m, ("global_sparsity",))
    if not isinstance(s.num_grads, int) and all(t != 0.0 for t, _ in s.num_grads):
        yield Finding(codes.M009, f"num_grads gives counts for sparsities {[t for t, _ in s.num_grads]} but none for 0.0",
                      "Add '0.0: COUNT', the number of gradients used until the first threshold.", m, arg_key(m, "num_grads"))
        return
    if s.num_pages != 1:
        yield Finding(codes.M012, f"num_pages {s.num_pages}: paging the gradients of an un-blocked inverse is not implemented",
                      "Remove num_pages; the memory check at modify() says when the inverse does not fit.",
                      m, arg_key(m, "num_pages"))


def arg_key(m: Modifier, arg: str) -> tuple[str, ...]:
    """Where argument ``arg`` is written: at the top, or inside ``mfac_options``."""
    if arg in m.args:
        return (arg,)
    options = m.args.get("mfac_options")
    if isinstance(options, Mapping) and arg in options:
        return ("mfac_options", arg)
    return ()
