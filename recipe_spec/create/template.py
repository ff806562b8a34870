"""The automatic recipe: SparseML 1.8 ``recipe_template``'s structure and schedule.

The text has the recipe variables first, then the modifier groups ``training_modifiers``,
``pruning_modifiers``, ``quantization_modifiers`` and ``distillation_modifiers`` (only those
that apply). The schedule for ``num_epochs`` E (defaults: E = 20, QAT):

======================  ==========================================================
QAT epochs Q            5 if E >= 15 else 2 (0 without quantization)
pruning                 epoch 0 to (E - Q) / 2, cubic, once per epoch, 0.05 -> sparsity
fine-tuning             to E - Q
QAT                     from E - Q (0 without pruning); observers and BN frozen Q/2 later
LR                      ``lr`` from init_lr at epoch 0 to final_lr at E, every step
======================  ==========================================================

Where SparseML's template had a literal that ignored its own variable (``final_sparsity: 0.8``,
``init_sparsity: 0.05``, ``update_frequency: 1.0``), the modifier here refers to the variable,
and the variable holds what SparseML ran (``pruning_update_frequency: 1.0``), so the defaults
give SparseML's schedule and ``sparsity`` changes the final sparsity.

>>> print(recipe_text(pruning=None, quantization=False))
lr_func: linear
init_lr: 0.001
final_lr: 1.0e-07
num_epochs: 20.0
<BLANKLINE>
training_modifiers:
  - !EpochRangeModifier
    start_epoch: 0.0
    end_epoch: eval(num_epochs)
<BLANKLINE>
  - !LearningRateFunctionModifier
    start_epoch: 0.0
    end_epoch: eval(num_epochs)
    lr_func: eval(lr_func)
    init_lr: eval(init_lr)
    final_lr: eval(final_lr)
<BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..masks.types import nm_of
from ..recipe.serialize import dump_value
from ..text.variables import did_you_mean
from .variables import RecipeVariables

__all__ = ["LR_FUNCTIONS", "LR_STEPS", "LR_OPTIONS", "PRUNING_OPTIONS", "normalize_pruning", "recipe_text",
           "modifier_types"]

#: ``lr`` values for LearningRateFunctionModifier's functions (SparseML's ``recipe_template``
#: passed ``lr`` straight to ``lr_func``, and that modifier knows these three): from init_lr
#: at epoch 0 to final_lr at num_epochs, every step.
LR_FUNCTIONS = ("linear", "cosine", "cyclic_linear")

#: ``lr`` values for LearningRateModifier's step-style classes, from init_lr down to final_lr
#: by a constant factor ``lr_gamma``: ``step`` (StepLR, 3 drops, every num_epochs / 4 epochs),
#: ``multistep`` (MultiStepLR, 2 drops, at 1/2 and 3/4 of num_epochs) and ``exponential``
#: (ExponentialLR, every epoch, reaching final_lr at num_epochs).
LR_STEPS = {"step": "StepLR", "multistep": "MultiStepLR", "exponential": "ExponentialLR"}

#: Every ``lr`` value.
LR_OPTIONS = (*LR_FUNCTIONS, *LR_STEPS)

# per step-style class: the variables written (name -> value as text) and its lr_kwargs
_LR_STEP_VARS = {
    "step": ({"lr_step_epochs": "eval(num_epochs / 4)", "lr_gamma": "eval((final_lr / init_lr) ** (1 / 3))"},
             {"step_size": "eval(lr_step_epochs)", "gamma": "eval(lr_gamma)"}),
    "multistep": ({"lr_gamma": "eval((final_lr / init_lr) ** (1 / 2))"},
                  {"milestones": ["eval(num_epochs / 2)", "eval(num_epochs * 3 / 4)"], "gamma": "eval(lr_gamma)"}),
    "exponential": ({"lr_gamma": "eval((final_lr / init_lr) ** (1 / num_epochs))"}, {"gamma": "eval(lr_gamma)"}),
}

#: ``pruning`` option -> the pruning algorithm it selects ("" = no pruning modifier)
PRUNING_OPTIONS = {
    "true": "magnitude", "magnitude": "magnitude", "gmp": "magnitude",
    "acdc": "acdc", "mfac": "mfac", "obs": "obs", "movement": "movement",
    "constant": "constant", "transfer": "constant", "sparse-transfer": "constant",
    "false": "", "none": "", "": "",
}

#: what M-FAC and OBS add to the variables (SparseML's template values)
_SECOND_ORDER = {"mfac": {"num_grads": 64, "fisher_block_size": 10000},
                 "obs": {"num_grads": 1024, "fisher_block_size": 50}}

_MODIFIER = {"acdc": "ACDCPruningModifier", "mfac": "MFACPruningModifier", "obs": "OBSPruningModifier",
             "movement": "MovementPruningModifier", "constant": "ConstantPruningModifier"}


def normalize_pruning(pruning: str | bool | None, quantization: bool) -> str:
    """The pruning algorithm an option selects: ``magnitude``, ``acdc``, ``mfac``, ``obs``,
    ``movement``, ``constant`` or ``""`` (none). ``False`` with quantization holds the zeros
    the model has (``constant``), as SparseML did.

    >>> normalize_pruning(True, True), normalize_pruning("Sparse-Transfer", False), normalize_pruning(False, True)
    ('magnitude', 'constant', 'constant')
    """
    key = str(pruning).lower().replace("/", "").replace("_", "-") if pruning is not None else ""
    if key not in PRUNING_OPTIONS:
        hint = did_you_mean(key, [k for k in PRUNING_OPTIONS if k])
        raise ValueError(f"Argument `pruning` must be one of True, False, None, "
                         f"{', '.join(repr(k) for k in PRUNING_OPTIONS if k not in ('true', 'false', 'none', ''))}. "
                         f"Received: pruning={pruning!r}." + (f" {hint}" if hint else ""))
    algo = PRUNING_OPTIONS[key]
    if key == "false" and quantization:
        return "constant"
    return algo


def _check_lr(lr: str) -> str:
    if lr not in LR_OPTIONS:
        hint = did_you_mean(str(lr), LR_OPTIONS)
        raise ValueError(f"Argument `lr` must be one of {', '.join(LR_OPTIONS)}. Received: lr={lr!r}."
                         + (f" {hint}" if hint else ""))
    return lr


def _scalar(value: Any) -> str:
    """One YAML scalar, as recipe-spec writes recipes (:func:`recipe_spec.recipe.serialize.dump_value`:
    floats with a dot and a signed exponent, strings quoted where a YAML 1.1 reader would
    misread them)."""
    return dump_value(value).removesuffix("...\n").strip()


def _modifier(name: str, args: Mapping[str, Any]) -> list[str]:
    lines = [f"  - !{name}"]
    for key, value in args.items():
        if isinstance(value, Mapping):
            lines.append(f"    {key}:")
            lines.extend(f"      {k}: [{', '.join(_scalar(x) for x in v)}]" if isinstance(v, list)
                         else f"      {k}: {_scalar(v)}" for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            lines.append(f"    {key}:")
            lines.extend(f"      - {_scalar(v)}" for v in value)
        else:
            lines.append(f"    {key}: {_scalar(value)}")
    return lines


def recipe_text(
    pruning: str | bool | None = True,
    quantization: bool = True,
    lr: str = "linear",
    distillation: bool = False,
    variables: Mapping[str, Any] | RecipeVariables | None = None,
    params: str | Sequence[str] = "__ALL_PRUNABLE__",
) -> str:
    """The automatic recipe (YAML text) for these options.

    ``pruning``: True / ``"gmp"`` / ``"magnitude"`` (magnitude; global or layer-wise by the
    ``global_sparsity`` variable), False or None (none; False with quantization holds the
    model's zeros), ``"acdc"``, ``"mfac"``, ``"obs"``, ``"movement"``, ``"constant"`` /
    ``"transfer"`` / ``"sparse-transfer"`` (ConstantPruningModifier: hold today's zeros).
    ``quantization``: QAT after pruning. ``lr``: one of :data:`LR_FUNCTIONS` or
    :data:`LR_STEPS`.
    ``distillation``: add a DistillationModifier. ``variables``: :class:`RecipeVariables` or a
    dict merged over its defaults. ``params``: the weights to prune.
    """
    if not isinstance(quantization, bool):
        raise ValueError(f"Argument `quantization` must be a bool. Received: quantization={quantization!r}")
    if not isinstance(distillation, bool):
        raise ValueError(f"Argument `distillation` must be a bool. Received: distillation={distillation!r}")
    v = RecipeVariables.merged(variables)
    algo = normalize_pruning(pruning, quantization)
    _check_lr(lr)
    if algo == "movement":
        # movement scores of different layers are not comparable: always layer-wise (Sparsify
        # raised on the default global_sparsity=True); only an explicit request is refused
        if isinstance(variables, Mapping) and variables.get("global_sparsity") is True:
            raise ValueError("Movement pruning ranks each layer on its own and cannot be global: "
                             "remove 'global_sparsity' from recipe_variables (or set it to False).")
        v = dataclasses.replace(v, global_sparsity=False)
    gradual = algo not in ("", "constant")

    # -- variables -------------------------------------------------------------------------
    var: dict[str, Any] = {"lr_func": lr} if lr in LR_FUNCTIONS else {"lr_class": LR_STEPS[lr]}
    var.update(init_lr=v.init_lr, final_lr=v.final_lr, num_epochs=v.num_epochs)
    if lr in LR_STEPS:
        if not v.final_lr > 0:
            raise ValueError(f"lr={lr!r} multiplies init_lr by a constant factor down to final_lr, so final_lr must "
                             f"be > 0. Received: final_lr={v.final_lr!r} (use lr='linear' to reach 0)")
        var.update(_LR_STEP_VARS[lr][0])
    qat_epochs = 0.0
    if quantization:
        qat_epochs = 5.0 if v.num_epochs >= 15.0 else 2.0
        if qat_epochs >= v.num_epochs:
            qat_epochs = v.num_epochs / 2.0  # short runs: half of them (SparseML's 2.0 would not fit)
        # SparseML wrote ``quantization_submodules: null`` and ``submodules: eval(...)``: null is
        # not a list of names (M004); leaving ``submodules`` out quantizes the whole model, as null did
        var.update(num_qat_epochs=qat_epochs, num_qat_finetuning_epochs=qat_epochs / 2.0,
                   quantization_tensorrt=v.target == "tensorrt")
    nm = nm_of(v.mask_type)
    if gradual:
        active = (v.num_epochs - qat_epochs) / 2.0
        if algo == "acdc":  # AC/DC phases are whole epochs: its end_epoch is an integer
            active = float(int(active)) or 1.0
        final = v.sparsity
        init = min(0.05, final)
        if nm is not None:  # an N:M mask has one sparsity, 1 - N/M, from the start
            final = init = 1.0 - nm[0] / nm[1]
        var.update(num_pruning_active_epochs=active,
                   num_pruning_finetuning_epochs=v.num_epochs - qat_epochs - active,
                   pruning_init_sparsity=init, pruning_final_sparsity=final,
                   pruning_update_frequency=min(1.0, active),
                   mask_type=v.mask_type, global_sparsity=v.global_sparsity,
                   _num_pruning_epochs="eval(num_pruning_active_epochs + num_pruning_finetuning_epochs)")
        var.update(_SECOND_ORDER.get(algo, {}))
    if distillation:
        var.update(distillation_hardness=v.hardness, distillation_temperature=v.temperature)

    lines = [f"{k}: {_scalar(val)}" for k, val in var.items()]

    # -- modifier groups ----------------------------------------------------------------------
    if lr in LR_FUNCTIONS:
        schedule = ("LearningRateFunctionModifier", {"start_epoch": 0.0, "end_epoch": "eval(num_epochs)",
                                                     "lr_func": "eval(lr_func)", "init_lr": "eval(init_lr)",
                                                     "final_lr": "eval(final_lr)"})
    else:
        schedule = ("LearningRateModifier", {"start_epoch": 0.0, "end_epoch": "eval(num_epochs)",
                                             "lr_class": "eval(lr_class)", "lr_kwargs": _LR_STEP_VARS[lr][1],
                                             "init_lr": "eval(init_lr)"})
    training = [("EpochRangeModifier", {"start_epoch": 0.0, "end_epoch": "eval(num_epochs)"}), schedule]
    groups: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [("training_modifiers", training)]
    if algo == "constant":
        groups.append(("pruning_modifiers", [("ConstantPruningModifier",
                                              {"start_epoch": 0.0, "params": "__ALL_PRUNABLE__"})]))
    elif gradual:
        args: dict[str, Any] = {"start_epoch": 0.0, "params": params if isinstance(params, str) else list(params)}
        if algo == "acdc":
            args.update(end_epoch="eval(num_pruning_active_epochs)", update_frequency="eval(pruning_update_frequency)",
                        mask_type="eval(mask_type)", global_sparsity="eval(global_sparsity)", leave_enabled=True,
                        compression_sparsity="eval(pruning_final_sparsity)")
        else:
            args.update(init_sparsity="eval(pruning_init_sparsity)", final_sparsity="eval(pruning_final_sparsity)",
                        end_epoch="eval(num_pruning_active_epochs)",
                        update_frequency="eval(pruning_update_frequency)", mask_type="eval(mask_type)")
            if algo in ("mfac", "obs"):
                args["global_sparsity"] = "eval(global_sparsity)"
            args.update(leave_enabled=True, inter_func="cubic")
            if algo in ("mfac", "obs"):
                args.update(num_grads="eval(num_grads)", fisher_block_size="eval(fisher_block_size)")
        if algo == "magnitude":
            name = "GlobalMagnitudePruningModifier" if v.global_sparsity else "MagnitudePruningModifier"
        else:
            name = _MODIFIER[algo]
        groups.append(("pruning_modifiers", [(name, args)]))
    if quantization:
        freeze = ("eval(_num_pruning_epochs + num_qat_epochs - num_qat_finetuning_epochs)" if gradual
                  else "eval(num_qat_epochs - num_qat_finetuning_epochs)")
        groups.append(("quantization_modifiers", [("QuantizationModifier", {
            "start_epoch": "eval(_num_pruning_epochs)" if gradual else 0.0,
            "disable_quantization_observer_epoch": freeze,
            "freeze_bn_stats_epoch": freeze,
            "tensorrt": "eval(quantization_tensorrt)",
            "quantize_linear_activations": False,
            "quantize_conv_activations": False,
            "quantize_embedding_activations": False,
            "exclude_module_types": ["LayerNorm", "Tanh"],
        })]))
    if distillation:
        groups.append(("distillation_modifiers", [("DistillationModifier", {
            "start_epoch": 0.0, "end_epoch": "eval(num_epochs)",
            "hardness": "eval(distillation_hardness)", "temperature": "eval(distillation_temperature)",
        })]))
    for group, modifiers in groups:
        lines.append("")
        lines.append(f"{group}:")
        for i, (name, args) in enumerate(modifiers):
            if i:
                lines.append("")
            lines.extend(_modifier(name, args))
    return "\n".join(lines) + "\n"


def modifier_types(text: str) -> list[str]:
    """The ``!Modifier`` tags of a generated recipe, in order."""
    return re.findall(r"^  - !(\w+)", text, flags=re.M)
