"""Stage/group quantization modifiers and transforms (all one-shot, validated only).

Argument availability read from the class annotations at each tag (llm-compressor 0.1.0 ...
0.13.0, SparseML v1.6.0 ... v1.9.0): e.g. GPTQ ``sequential_update`` is gone in 0.8.0,
``sequential_targets`` in 0.11.0 (#1559), ``quantize`` / ``num_calibration_steps`` /
``disable_quantization_observer_epoch`` in 0.6.0 (QuantizationMixin); AWQModifier came in
0.5.1 and became a transform without ``scheme``/``targets``/``ignore`` in 0.11.0 (#2526).
"""

from __future__ import annotations

from typing import Any

from ..modifiers.spec import Arg
from .spec import Renamed, StageSpec, arg, declare

__all__ = ["SPECS", "mixin_args"]

_STR_LIST: dict[str, Any] = {"type": ["string", "array"], "items": {"type": "string"}}
_NUM_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}


def mixin_args(llmc: str, *, sparseml: str | None = None) -> tuple[Arg, ...]:
    """The ``QuantizationMixin`` arguments, in llm-compressor releases ``llmc`` (a range),
    and also in SparseML ``sparseml`` where given (``config_groups``/``ignore``/``scheme``)."""
    both = {"llmcompressor": llmc, **({"sparseml": sparseml} if sparseml is not None else {})}

    def rng(extra: str) -> str:
        return ",".join(filter(None, (llmc, extra)))

    return (
        arg("config_groups", "Group name -> QuantizationScheme (targets, weights, "
            "input_activations, output_activations).", both, oneshot="runs", type=["object", "null"]),
        arg("targets", "Layers to quantize (names, 're:' patterns, class names).",
            both, oneshot="runs", **_STR_LIST, default=["Linear"]),
        arg("ignore", "Layers left unquantized.", both, oneshot="runs", **_STR_LIST, default=[]),
        arg("scheme", "Preset scheme name (e.g. W4A16) or {PRESET: [targets]}.", both,
            oneshot="runs", type=["string", "object", "null"]),
        arg("kv_cache_scheme", "QuantizationArgs for the attention KV cache.",
            {"llmcompressor": rng(">=0.2")}, oneshot="default", type=["object", "null"], default=None),
        *(arg(n, f"Observer for {w} (e.g. minmax, mse).", {"llmcompressor": rng(">=0.9")},
              oneshot="default", type=["string", "null"], default=None)
          for n, w in (("weight_observer", "weights"), ("input_observer", "input activations"),
                       ("output_observer", "output activations"))),
        arg("observer", "{weights|input|output: observer name}.", {"llmcompressor": rng(">=0.9")},
            oneshot="default", type=["object", "null"], default=None),
        arg("bypass_divisibility_checks", "Skip the shape divisibility checks.",
            {"llmcompressor": rng(">=0.10")}, oneshot="default", type="boolean", default=False),
    )


_OLD_QUANT = (
    arg("disable_quantization_observer_epoch", "Epoch at which observers are frozen.",
        {"sparseml": ">=1.8", "llmcompressor": "<0.6"}, **_NUM_OR_NULL),
    arg("num_calibration_steps", "Calibration batches.",
        {"sparseml": ">=1.8", "llmcompressor": "<0.6"}, type=["integer", "null"]),
)
_QUANT = {"config_groups": "groups", "scheme": "scheme", "kv_cache_scheme": "args"}

QUANTIZATION = declare(
    "QuantizationModifier",
    "Compressed-tensors quantization (round-to-nearest; calibrates static activations).",
    "quantization", {"sparseml": ">=1.8", "llmcompressor": ""},
    (*mixin_args("", sparseml=">=1.8"), *_OLD_QUANT),
    required={"config_groups": {"sparseml": ">=1.8"}}, quant=_QUANT,
    example={"targets": ["Linear"], "scheme": "W8A8", "ignore": ["lm_head"]},
    notes="SparseML 1.6/1.7's QuantizationModifier is the QAT one (catalogue_train).",
    oneshot_needs=frozenset({"oneshot", "oneshot:quantize"}),
)

VLLM_QUANTIZATION = declare(
    "vLLMQuantizationModifier",
    "Development name of the compressed-tensors QuantizationModifier (SparseML, May 2024); "
    "no release has it.",
    "quantization", {}, mixin_args(""),
    renamed_to="QuantizationModifier",
)

GPTQ = declare(
    "GPTQModifier", "GPTQ one-shot weight quantization (second-order error correction).",
    "quantization", {"sparseml": ">=1.8", "llmcompressor": ""},
    (
        *mixin_args("", sparseml=">=1.8"), *_OLD_QUANT,
        arg("sequential_update", "Update layer by layer (no longer configurable).",
            {"sparseml": ">=1.8", "llmcompressor": "<0.8"}, type=["boolean", "null"]),
        arg("sequential_targets", "Layer classes compressed one after another.",
            {"llmcompressor": "<0.11"}, type=["string", "array", "null"]),
        arg("block_size", "Columns processed per block.", oneshot="runs", type="integer", minimum=1,
            default=128),
        arg("dampening_frac", "Hessian dampening fraction.", oneshot="runs", **_NUM_OR_NULL, minimum=0,
            default=0.01),
        arg("quantize", "Whether to quantize, or QuantizationModifier arguments.",
            {"sparseml": ">=1.8", "llmcompressor": "<0.6"}, type=["boolean", "object"]),
        arg("offload_hessians", "Keep Hessians on the CPU.", {"llmcompressor": ">=0.4"},
            oneshot="inert", type="boolean"),
        arg("actorder", "Activation ordering (group, weight, static, dynamic).",
            {"llmcompressor": ">=0.6"}, oneshot="runs", type=["string", "boolean", "null"],
            enum=[True, False, None, "group", "weight", "static", "dynamic"], ci=True),
    ),
    renamed=(Renamed("percdamp", "dampening_frac", "development name, renamed before SparseML "
                     "1.8"),),
    quant=_QUANT, example={"targets": "Linear", "scheme": "W4A16", "ignore": ["lm_head"]},
    instead={
        "sequential_update": "delete it: layers are always updated one after another",
        "quantize": "delete it: GPTQModifier always quantizes (its scheme/config_groups)",
    },
    oneshot_needs=frozenset({"oneshot", "oneshot:quantize", "scores:gptq"}),
)

_SMOOTH_ARGS = (
    arg("smoothing_strength", "Migration strength alpha (0-1).",
        {"sparseml": ">=1.8", "llmcompressor": ""}, oneshot="runs", type="number", minimum=0, maximum=1,
        default=0.5),
    arg("alpha", "Migration strength (the name SparseML 1.6/1.7 read; smoothing_strength "
        "there is ignored).", {"sparseml": "<1.8"}, type="number", minimum=0, maximum=1),
    arg("mappings", "[[balance layers], smooth layer] pairs.", oneshot="runs", type=["array", "null"]),
    arg("ignore", "Layers not smoothed.", oneshot="runs", type=["array", "null"], items={"type": "string"}),
    arg("num_calibration_steps", "Calibration batches (declared and never read by llm-compressor).",
        oneshot="default", type=["integer", "null"], default=None),
    arg("algorithm", "smoothquant or log_equalization.", {"llmcompressor": ">=0.11"}, oneshot="runs",
        enum=["smoothquant", "log_equalization"]),
)
_SMOOTH_RENAMES = (
    Renamed("smoothing_strength", "alpha", "SparseML 1.6/1.7 declare it with alias alpha"),
    Renamed("alpha", "smoothing_strength"),
)

SMOOTHQUANT = declare(
    "SmoothQuantModifier", "SmoothQuant: migrate activation outliers into the weights.",
    "quantization", {"sparseml": "", "llmcompressor": ""}, _SMOOTH_ARGS,
    required={"mappings": {"sparseml": ""}}, renamed=_SMOOTH_RENAMES,
    example={"smoothing_strength": 0.8},
    oneshot_needs=frozenset({"oneshot", "transform:smoothquant"}),
)

LOG_EQUALIZATION = declare(
    "LogarithmicEqualizationModifier", "SmoothQuant with logarithmic scales.",
    "quantization", {"sparseml": "", "llmcompressor": ""}, _SMOOTH_ARGS,
    required={"mappings": {"sparseml": ""}}, renamed=_SMOOTH_RENAMES,
    example={"mappings": [[["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"],
                           "re:.*input_layernorm"]]},
    oneshot_needs=frozenset({"oneshot", "transform:smoothquant"}),
)

def smallest_grid(duo_scaling: bool | str, to_one: bool = True) -> int:
    """The smallest ``n_grid`` :func:`recipe_spec.oneshot.awq.search.grid` takes for ``duo_scaling``: with ratios up to one
    (llm-compressor 0.11 and later) 2 without duo scaling, 3 with it (the identity and at least
    two ratios ``i / (n_grid - 2)``), 4 for ``"both"`` (two ratios each way); 0.10 and before
    (ratios ``i / n``) 1, and 2 for ``"both"``. Below it llm-compressor divides by zero or
    searches nothing.

    >>> [smallest_grid(d) for d in (False, True, "both")], smallest_grid("both", to_one=False)
    ([2, 3, 4], 2)
    """
    if to_one:
        return 4 if duo_scaling == "both" else 3 if duo_scaling is True else 2
    return 2 if duo_scaling == "both" else 1


_AWQ_GONE = ("AWQModifier is a transform since llm-compressor 0.11: put it on the "
             "QuantizationModifier or GPTQModifier that follows")

#: AWQModifier came in llm-compressor 0.5.1 (0.5.0 had none) with a search grid of its own
#: (``num_bits``, ``group_size``, ``symmetric``) and ``max_chunk_memory``; 0.5.2 replaced the
#: grid with ``QuantizationMixin``'s arguments and dropped ``max_chunk_memory`` in 0.6. The
#: catalogue's releases are minor ones: "0.5" holds what either 0.5 patch release takes.
_AWQ_OWN_GRID = (
    arg("num_bits", "Bits of AWQ's own search grid (0.5.1).", {"llmcompressor": "<0.6"}, type="integer",
        minimum=1),
    arg("group_size", "Group size of AWQ's own search grid (0.5.1).", {"llmcompressor": "<0.6"},
        type="integer"),
    arg("symmetric", "Symmetric own search grid (0.5.1).", {"llmcompressor": "<0.6"}, type="boolean"),
    arg("max_chunk_memory", "Memory per chunk of cached activations (no effect on the result).",
        {"llmcompressor": "<0.6"}, type="integer", minimum=1),
)

AWQ = declare(
    "AWQModifier", "AWQ activation-aware scaling (a transform from 0.11; must be followed by a "
    "quantization modifier).", "quantization", {"llmcompressor": ">=0.5"},
    (
        *mixin_args("<0.11"),
        *_AWQ_OWN_GRID,
        arg("mappings", "Smooth/balance layer mappings.", oneshot="runs", type=["array", "null"]),
        arg("offload_device", "Device for cached activations.", oneshot="runs", type=["string", "null"]),
        arg("duo_scaling", "Use weights and activations for scales (true/false/both).",
            oneshot="runs", type="boolean", enum=[True, False, "both"], default=True),
        arg("n_grid", "Grid points of the scale search.", {"llmcompressor": ">=0.9"},
            oneshot="runs", type="integer", minimum=1, default=20),
        arg("sequential_targets", "Layer classes processed one after another.",
            {"llmcompressor": "<0.11"}, type=["string", "array", "null"]),
    ),
    quant=_QUANT, notes=_AWQ_GONE, example={"duo_scaling": "both"},
    instead={n: _AWQ_GONE for n in ("config_groups", "targets", "ignore", "scheme",
                                    "kv_cache_scheme", "weight_observer", "input_observer",
                                    "output_observer", "observer", "bypass_divisibility_checks")},
    oneshot_needs=frozenset({"oneshot", "transform:awq"}),
)

AUTOROUND = declare(
    "AutoRoundModifier", "AutoRound: sign-gradient tuning of rounding and clipping.",
    "quantization", {"llmcompressor": ">=0.9"},
    (
        *mixin_args(""),
        arg("iters", "Tuning iterations per block (0: auto-round's optimised round to nearest).", oneshot="runs",
            type="integer", minimum=0, default=200),
        arg("enable_torch_compile", "Compile the block's tuning loop (torch.compile).", oneshot="runs",
            type="boolean", default=True),
        arg("batch_size", "Tuning batch size.", oneshot="runs", type="integer", minimum=1, default=8),
        arg("lr", "Learning rate (null: 1 / iters).", {"llmcompressor": ">=0.10"}, oneshot="runs",
            **_NUM_OR_NULL, exclusiveMinimum=0, default=None),
        arg("device_ids", "Devices to tune on (auto-round's multi-device dispatch; not run one-shot).",
            {"llmcompressor": ">=0.10"}, oneshot="default", type=["string", "null"], default=None),
        arg("disable_opt_rtn", "Disable optimized RTN.", {"llmcompressor": ">=0.11"}, oneshot="runs",
            type="boolean", default=False),
        arg("sequential_targets", "Layer classes tuned one after another.",
            {"llmcompressor": "<0.11"}, type=["string", "array", "null"]),
    ),
    quant=_QUANT, example={"targets": "Linear", "scheme": "W4A16", "ignore": ["lm_head"],
                           "iters": 200},
    oneshot_needs=frozenset({"oneshot", "oneshot:quantize", "quantize:autoround"}),
)

#: The dtype names a rotation's ``precision`` takes (compressed-tensors' ``TorchDtype``).
_PRECISIONS = ("torch.float64", "torch.float32", "torch.bfloat16", "torch.float16", "float64", "float32",
               "bfloat16", "float16")
#: The arguments QuIP and SpinQuant share.
_ROTATION_ARGS = (
    arg("randomize", "Distinct random rotations per layer (llm-compressor 0.14 refuses true).",
        oneshot="default", type="boolean", default=False),
    arg("learnable", "Trainable rotations (llm-compressor 0.14 refuses true).", oneshot="default",
        type="boolean", default=False),
    arg("precision", "Dtype the rotations are applied in.", oneshot="runs", enum=list(_PRECISIONS),
        default="torch.float64"),
)

SPINQUANT = declare(
    "SpinQuantModifier", "SpinQuant rotations (data-free transform).", "transform",
    {"llmcompressor": ">=0.7"},
    (
        arg("rotations", "Rotations to apply (R1, R2, R3, R4; on Keras R1 and R2, the ones fused into the weights).",
            oneshot="runs",
            type="array", items={"enum": ["R1", "R2", "R3", "R4"]}, minItems=1, default=["R1", "R2"]),
        arg("transform_type", "hadamard, random-hadamard or random-matrix.", oneshot="runs",
            enum=["hadamard", "random-hadamard", "random-matrix"], default="hadamard"),
        *_ROTATION_ARGS,
        arg("transform_block_size", "Block size of R1 and R4 (default: the layer's width).",
            {"llmcompressor": ">=0.8"}, oneshot="runs", type=["integer", "null"], minimum=1, default=None),
        arg("transform_config", "Explicit compressed-tensors TransformConfig (llm-compressor 0.14 stops on it).",
            oneshot="default", type=["object", "null"], default=None),
        arg("mappings", "Model layer mapping (default: the architecture's).", oneshot="default",
            type=["object", "null"], default=None),
        arg("norm_mappings", "Norm layer mappings (default: the architecture's).", oneshot="default",
            type=["array", "null"], default=None),
    ),
    example={"rotations": ["R1", "R2"], "transform_type": "hadamard"},
    oneshot_needs=frozenset({"oneshot", "transform:rotations"}),
)

QUIP = declare(
    "QuIPModifier", "QuIP incoherence rotations (data-free transform).", "transform",
    {"llmcompressor": ">=0.7"},
    (
        arg("rotations", "Sides rotated (v: inputs, u: outputs).", {"llmcompressor": ">=0.8"}, oneshot="runs",
            type="array", items={"enum": ["v", "u"]}, minItems=1, default=["v"]),
        arg("transform_type", "hadamard, random-hadamard or random-matrix.", oneshot="runs",
            enum=["hadamard", "random-hadamard", "random-matrix"], default="random-hadamard"),
        *_ROTATION_ARGS,
        arg("transform_block_size", "Block size of the rotation (default: each layer's width).",
            {"llmcompressor": ">=0.8"}, oneshot="runs", type=["integer", "null"], minimum=1, default=None),
        arg("transform_config", "Explicit compressed-tensors TransformConfig (replaces the others).",
            oneshot="runs", type=["object", "null"], default=None),
        arg("targets", "Layers rotated.", oneshot="runs", **_STR_LIST, default="Linear"),
        arg("ignore", "Layers not rotated.", oneshot="runs", **_STR_LIST, default="lm_head"),
    ),
    example={"transform_type": "random-hadamard", "targets": ["Linear"], "ignore": ["lm_head"]},
    oneshot_needs=frozenset({"oneshot", "transform:rotations", "transform:online-rotations"}),
)

SPECS: tuple[StageSpec, ...] = (
    QUANTIZATION, VLLM_QUANTIZATION, GPTQ, SMOOTHQUANT, LOG_EQUALIZATION, AWQ, AUTOROUND,
    SPINQUANT, QUIP,
)
