"""Stage/group training-time modifiers and their ``!Modifier`` twins.

Each declares the twin in :func:`recipe_spec.modifiers.all_specs` and a pure translation of
its arguments into the twin's. An argument without an exact twin makes the translation
refuse (a reason string) rather than approximate; nothing is mapped onto a different
algorithm. ``start``/``end``/``update`` are epochs in both dialects.

>>> t = translate_magnitude({"targets": ["re:.*weight"], "init_sparsity": 0.05,
...     "final_sparsity": 0.8, "start": 0, "end": 10, "update": 1}, None)
>>> t.twin, t.ok, t.args["params"], t.args["end_epoch"]
('MagnitudePruningModifier', True, ['re:.*weight'], 10)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .spec import Renamed, StageSpec, Translation, arg, declare
from .versions import Compat, Version

__all__ = ["SPECS", "translate_constant", "translate_magnitude", "translate_legacy_quant",
           "translate_distillation"]

_TARGETS = arg("targets", "Parameters/layers (names, 're:' patterns, __ALL_PRUNABLE__).",
               oneshot="runs", type=["string", "array"], items={"type": "string"})
_TOKENS = {"__ALL__", "__ALL_PRUNABLE__", "__ALL_QUANTIZABLE__"}
_UNSET = (None, -1, -1.0)
_TWIN_NAMES = tuple(Renamed(old, new, "the !Modifier dialect's name") for old, new in (
    ("params", "targets"), ("start_epoch", "start"), ("end_epoch", "end"),
    ("update_frequency", "update")))


def _as_params(targets: Any) -> tuple[list[str], list[str]]:
    """Targets as the twin's ``params``: (selectors, refusal reasons). Only parameter
    selectors map exactly (names/patterns ending in weight or bias, and the tokens)."""
    items = [targets] if isinstance(targets, str) else list(targets) if isinstance(targets, (list, tuple)) else (
        [targets] if targets is not None else [])
    bad = [t for t in items if not isinstance(t, str) or not (
        t.upper() in _TOKENS or re.search(r"(weight|bias)\$?$", t))]
    reasons = [f"targets {bad!r} name layers or classes; the twin's params select "
               "parameters (write them as '<layer>.weight')"] if bad else []
    return [str(t) for t in items], reasons


def _schedule(args: Mapping[str, Any], out: dict[str, Any], *, update: bool = True) -> None:
    for core, twin in (("start", "start_epoch"), ("end", "end_epoch")):
        if args.get(core) is not None:
            out[twin] = args[core]
    if update and args.get("update") is not None:
        out["update_frequency"] = args["update"]


def _unmapped(args: Mapping[str, Any], mapped: set[str]) -> list[str]:
    rest = sorted(k for k in args if k not in mapped | {"index", "group"})
    return [f"{k} has no twin argument" for k in rest]


def translate_constant(args: Mapping[str, Any], compat: Compat | None) -> Translation:
    """ConstantPruningModifier (stage/group) -> ConstantPruningModifier (``!Modifier``)."""
    params, refused = _as_params(args.get("targets"))
    out: dict[str, Any] = {"params": params}
    _schedule(args, out)
    refused += _unmapped(args, {"targets", "start", "end", "update"})
    return Translation("ConstantPruningModifier", out, tuple(refused))


_MASKS = re.compile(r"^(unstructured|[1-9][0-9]*:[1-9][0-9]*)$")


def translate_magnitude(args: Mapping[str, Any], compat: Compat | None) -> Translation:
    """MagnitudePruningModifier (stage/group) -> MagnitudePruningModifier (``!Modifier``).

    ``leave_enabled`` defaults to True in SparseML and llm-compressor < 0.5, False after.
    """
    params, refused = _as_params(args.get("targets"))
    out: dict[str, Any] = {"params": params}
    for key in ("init_sparsity", "final_sparsity"):
        if key in args:
            out[key] = args[key]
    _schedule(args, out)
    for key in ("start_epoch", "end_epoch", "update_frequency"):
        if out.get(key) in _UNSET and key != "start_epoch":
            refused.append(f"{key.replace('_epoch', '').replace('_frequency', '')} is unset; "
                           f"the twin needs an explicit {key}")
    scheduler = args.get("update_scheduler", "cubic")
    if scheduler in ("cubic", "linear"):
        out["inter_func"] = scheduler
    else:
        refused.append(f"update_scheduler {scheduler!r} has no twin inter_func")
    if args.get("scheduler_args"):
        refused.append("scheduler_args has no twin argument")
    mask = str(args.get("mask_structure", "unstructured"))
    if _MASKS.match(mask):
        out["mask_type"] = mask
    else:
        refused.append(f"mask_structure {mask!r} has no exact twin mask_type")
    old_default = compat is None or compat.tool == "sparseml" or compat.version < Version((0, 5))
    out["leave_enabled"] = bool(args.get("leave_enabled", old_default))
    if args.get("apply_globally"):
        refused.append("apply_globally ranks all layers together; the twin ranks layer by "
                       "layer")
    refused += _unmapped(args, {"targets", "init_sparsity", "final_sparsity", "start", "end",
                                "update", "update_scheduler", "scheduler_args",
                                "mask_structure", "leave_enabled", "apply_globally"})
    return Translation("MagnitudePruningModifier", out, tuple(refused))


_QAT_SAME = ("ignore", "disable_quantization_observer_epoch", "freeze_bn_stats_epoch",
             "model_fuse_fn_name", "model_fuse_fn_kwargs", "num_calibration_steps", "scheme",
             "scheme_overrides", "strict")


def translate_legacy_quant(args: Mapping[str, Any], compat: Compat | None) -> Translation:
    """LegacyQuantizationModifier / SparseML 1.6-1.7 QuantizationModifier (QAT) ->
    QuantizationModifier (``!Modifier``): the same SparseML QAT code underneath."""
    out: dict[str, Any] = {k: args[k] for k in _QAT_SAME if k in args}
    _schedule(args, out, update=False)
    refused = []
    if args.get("post_oneshot_calibration"):
        refused.append("post_oneshot_calibration has no twin argument")
    if args.get("update") is not None:
        refused.append("update has no twin argument")
    refused += _unmapped(args, {*_QAT_SAME, "start", "end", "update",
                                "post_oneshot_calibration"})
    return Translation("QuantizationModifier", out, tuple(refused))


def translate_distillation(args: Mapping[str, Any], compat: Compat | None) -> Translation:
    """OutputDistillationModifier has no exact twin: it compares layer outputs (with
    projections and transforms), DistillationModifier compares model outputs."""
    return Translation("DistillationModifier", {}, (
        "OutputDistillationModifier distils intermediate layer outputs; DistillationModifier "
        "distils the model's outputs (a different algorithm)",))


CONSTANT = declare(
    "ConstantPruningModifier", "Keep the current zeros of the targets while training.",
    "pruning", {"sparseml": "", "llmcompressor": ""}, (_TARGETS,), training=True,
    required={"targets": {"sparseml": "", "llmcompressor": ""}},
    twin="ConstantPruningModifier", translate=translate_constant, renamed=_TWIN_NAMES,
    example={"targets": ["re:.*q_proj.weight"], "start": 0},
    oneshot_needs=frozenset({"oneshot"}),
)

MAGNITUDE = declare(
    "MagnitudePruningModifier", "Gradual magnitude pruning while training.", "pruning",
    {"sparseml": "", "llmcompressor": ""},
    (
        _TARGETS,
        arg("init_sparsity", "Sparsity at start.", oneshot="inert", type="number", minimum=0,
            exclusiveMaximum=1, fraction=True),
        arg("final_sparsity", "Sparsity at end.", oneshot="runs", type="number", minimum=0,
            exclusiveMaximum=1, fraction=True),
        arg("update_scheduler", "cubic, linear, polynomial_decay or polynomial.", oneshot="inert",
            enum=["cubic", "linear", "polynomial_decay", "polynomial"]),
        arg("scheduler_args", "Scheduler arguments (e.g. exponent).", oneshot="inert", type="object"),
        arg("mask_structure", "unstructured, channel, filter or 'N:M'.", oneshot="runs", type="string",
            nm=True),
        arg("leave_enabled", "Keep masks after end.", oneshot="inert", type="boolean"),
        arg("apply_globally", "Rank all targets together.", type="boolean"),
    ),
    training=True,
    required={k: {"sparseml": "", "llmcompressor": ""}
              for k in ("targets", "init_sparsity", "final_sparsity")},
    twin="MagnitudePruningModifier", translate=translate_magnitude,
    renamed=(*_TWIN_NAMES, Renamed("inter_func", "update_scheduler"),
             Renamed("mask_type", "mask_structure")),
    example={"targets": ["re:.*q_proj.weight"], "init_sparsity": 0.05, "final_sparsity": 0.8,
             "start": 0, "end": 10, "update": 1},
    oneshot_needs=frozenset({"oneshot", "scores:magnitude"}),
)

_QAT_ARGS = (
    arg("ignore", "Module types or names left unquantized.", type=["array", "null"],
        items={"type": "string"}),
    arg("disable_quantization_observer_epoch", "Epoch at which observers freeze.",
        type=["number", "null"]),
    arg("freeze_bn_stats_epoch", "Epoch at which BN statistics freeze.", type=["number", "null"]),
    arg("model_fuse_fn_name", "Fusing function name.", type=["string", "null"]),
    arg("model_fuse_fn_kwargs", "Fusing function arguments.", type=["object", "null"]),
    arg("num_calibration_steps", "Calibration batches.", type=["integer", "null"]),
    arg("post_oneshot_calibration", "Calibrate after a one-shot run.", type=["boolean", "null"]),
    arg("strict", "Fail on unmatched scheme_overrides/ignore.", type="boolean"),
    arg("scheme", "Default QAT scheme (weights/input_activations/...).",
        type=["object", "string", "null"]),
    arg("scheme_overrides", "Module type or name -> scheme.", type=["object", "null"]),
)

#: SparseML's QAT schemes, checked by :mod:`.legacy_scheme`.
_QAT_SCHEMES = {"scheme": "legacy:scheme", "scheme_overrides": "legacy:overrides"}

_QAT_EXAMPLE = {"start": 0, "disable_quantization_observer_epoch": 3,
                "freeze_bn_stats_epoch": 3}

QAT_QUANTIZATION = declare(
    "QuantizationModifier", "SparseML 1.6/1.7 quantization-aware training (QAT).",
    "quantization", {"sparseml": "<1.8"}, _QAT_ARGS, training=True, quant=_QAT_SCHEMES,
    twin="QuantizationModifier", translate=translate_legacy_quant, example=_QAT_EXAMPLE,
    notes="From SparseML 1.8 this class is LegacyQuantizationModifier.",
)

LEGACY_QUANTIZATION = declare(
    "LegacyQuantizationModifier", "SparseML quantization-aware training (QAT).",
    "quantization", {"sparseml": ">=1.8"}, _QAT_ARGS, training=True, quant=_QAT_SCHEMES,
    twin="QuantizationModifier", translate=translate_legacy_quant, example=_QAT_EXAMPLE,
)

DISTILLATION = declare(
    "OutputDistillationModifier", "Distil teacher layer outputs into the student.",
    "distillation", {"sparseml": "", "llmcompressor": "<0.9"},
    (
        arg("targets", "Layer names or (student, teacher) pairs.", type=["string", "array"]),
        arg("projection", "Projection between layers.", type=["string", "null"]),
        arg("projection_args", "Projection arguments.", type=["object", "null"]),
        arg("transforms", "Transforms of the outputs.", type=["string", "array"]),
        arg("transforms_args", "Transform arguments.", type=["object", "array", "null"]),
        arg("comparison", "Loss between outputs (e.g. kl_divergence).", type="string"),
        arg("comparison_args", "Comparison arguments.", type=["object", "null"]),
        *(arg(n, d, {"sparseml": ">=1.7", "llmcompressor": ""}, type=t)
          for n, d, t in (("orig_scale", "Weight of the original loss.", "number"),
                          ("distill_scale", "Weight of the distillation loss.", "number"),
                          ("offload_layer_output", "Offload outputs to the CPU.", "boolean"))),
    ),
    training=True, required={"targets": {"sparseml": "", "llmcompressor": ""}},
    twin="DistillationModifier", translate=translate_distillation,
    example={"targets": ["re:model\\.layers\\.\\d+$"], "comparison": "kl_divergence", "start": 0},
)

SPECS: tuple[StageSpec, ...] = (CONSTANT, MAGNITUDE, QAT_QUANTIZATION, LEGACY_QUANTIZATION,
                               DISTILLATION)
