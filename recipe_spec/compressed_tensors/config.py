"""The quantization config a QuantizationModifier or GPTQModifier resolves to, framework-free:
compressed-tensors 0.19's ``QuantizationArgs`` / ``QuantizationScheme`` / preset schemes and
llm-compressor 0.14's ``QuantizationMixin.resolve_quantization_config`` (with GPTQ's
activation-order default), as plain mappings.

The result has the fields and values of compressed-tensors' ``QuantizationConfig``
(``model_dump()``) that llm-compressor builds, so a backend can hand it to compressed-tensors as
it is and the saved ``quantization_config`` comes out field for field as llm-compressor's:

- ``scheme: W4A16`` (a preset name; case-insensitive) is ``{W4A16: targets}``; a mapping
  ``{preset: targets}`` gives one group per preset, ``group_0``, ``group_1``, ...; explicit
  ``config_groups`` are read as they are; ``scheme`` and ``config_groups`` together are an
  error (as in llm-compressor);
- each ``QuantizationArgs`` is completed as compressed-tensors completes it: the strategy
  inferred from ``group_size`` (none: ``tensor``, ``-1``: ``channel``, positive: ``group``),
  the zero-point dtype (saved only for asymmetric grids);
- observers as llm-compressor fills them: an observer written in the recipe (or by the preset,
  e.g. FP8's ``static_minmax`` inputs) is kept; otherwise weights get ``memoryless_minmax``,
  static activations ``minmax`` and dynamic ones none;
- GPTQ: ``actorder`` left out of the modifier turns each group's ``actorder: null`` into
  ``static``; ``actorder: null`` on the modifier turns it off.

A scheme's ``input_activations`` as a layer's call depends on them (bits, int or FP8,
symmetric, per token at run time or one calibrated scale per tensor) are :class:`ActivationArgs`;
the presets' are read from :data:`~.presets.PRESET_SCHEMES` (:data:`PRESET_ACTIVATIONS`), as a
weight's grid is (:data:`recipe_spec.quantization.args.PRESET_WEIGHTS`), so each preset is
defined once, in :mod:`.presets`.

>>> c = resolve_config({"scheme": "W4A16", "targets": ["Linear"], "ignore": ["lm_head"]}, gptq=True)
>>> w = c["config_groups"]["group_0"]["weights"]
>>> w["num_bits"], w["strategy"], w["group_size"], w["actorder"], w["observer"]
(4, 'group', 128, 'static', 'memoryless_minmax')
>>> preset_activations("W8A8")
ActivationArgs(num_bits=8, type='int', strategy='token', symmetric=True, dynamic=True, group_size=None)
>>> preset_activations("W4A16") is None
True
>>> ActivationArgs.from_config({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}).describe()
'float8 per tensor static'
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fields import ARG_DEFAULTS, ARG_NAMES, SCHEME_NAMES
from .presets import PRESET_SCHEMES, UNSUPPORTED_PRESETS

__all__ = ["PRESET_SCHEMES", "UNSUPPORTED_PRESETS", "ARG_FIELDS", "complete_args", "resolve_config",
           "is_preset", "ActivationArgs", "ACTIVATION_STRATEGIES", "PRESET_ACTIVATIONS", "preset_activations"]

#: ``QuantizationArgs`` fields, in compressed-tensors' order (:mod:`.fields`).
ARG_FIELDS = ARG_NAMES
_DEFAULTS = ARG_DEFAULTS
_SCHEME_FIELDS = SCHEME_NAMES


#: The activation strategies compressed-tensors 0.19 names: one scale per token (row of the
#: flattened input), per tensor, per group of columns, or per tensor and group (NVFP4).
ACTIVATION_STRATEGIES = ("token", "tensor", "group", "tensor_group")
_ACTIVATION_IGNORED = frozenset({"observer", "observer_kwargs", "actorder", "block_structure", "scale_dtype",
                                 "zp_dtype"})


@dataclass(frozen=True)
class ActivationArgs:
    """A scheme's ``input_activations``, the half of a scheme a deployed layer's call depends on
    besides the weight's grid (:class:`~.args.QuantArgs`): ``num_bits``, ``type`` (``"int"`` or
    ``"float"``), ``strategy`` (:data:`ACTIVATION_STRATEGIES`), ``symmetric``, ``dynamic``
    (scales computed at run time; ``"local"``, NVFP4's, counts as dynamic) and ``group_size``."""

    num_bits: int = 8
    type: str = "int"
    strategy: str = "token"
    symmetric: bool = True
    dynamic: bool = True
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.type not in ("int", "float"):
            raise ValueError(f"activation type must be 'int' or 'float', got {self.type!r}")
        if self.strategy not in ACTIVATION_STRATEGIES:
            raise ValueError(f"activation strategy must be one of {', '.join(ACTIVATION_STRATEGIES)}, "
                             f"got {self.strategy!r}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ActivationArgs | None:
        """Read a recipe's ``input_activations:`` mapping (None: weight-only), with
        compressed-tensors' defaults (8 bits, int, symmetric, static; the strategy ``tensor``
        unless ``group_size`` is given)."""
        if config is None:
            return None
        unknown = sorted(set(config) - {"num_bits", "type", "strategy", "symmetric", "dynamic", "group_size"}
                         - _ACTIVATION_IGNORED)
        if unknown:
            raise ValueError(f"unknown input_activations argument(s) {', '.join(unknown)}")
        group_size = config.get("group_size")
        strategy = config.get("strategy") or ("tensor" if group_size is None else "group")
        dynamic = config.get("dynamic", False)
        return cls(num_bits=int(config.get("num_bits", 8)), type=str(config.get("type", "int")),
                   strategy=str(strategy), symmetric=bool(config.get("symmetric", True)),
                   dynamic=bool(dynamic), group_size=group_size)

    def describe(self) -> str:
        """``int8 per token dynamic``, ``float8 per tensor static``, ..."""
        kind = f"{self.type}{self.num_bits}"
        where = {"token": "per token", "tensor": "per tensor"}.get(self.strategy, self.strategy)
        sym = "" if self.symmetric else " asymmetric"
        return f"{kind} {where}{sym} {'dynamic' if self.dynamic else 'static'}"


#: The input activations of compressed-tensors 0.19's preset schemes, read from
#: :data:`PRESET_SCHEMES`: None where the scheme is weight-only.
PRESET_ACTIVATIONS: dict[str, ActivationArgs | None] = {
    name: ActivationArgs.from_config(scheme.get("input_activations")) for name, scheme in PRESET_SCHEMES.items()}


def preset_activations(name: str) -> ActivationArgs | None:
    """The input activations of a preset scheme, by its name (None: weight-only)."""
    try:
        return PRESET_ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown preset scheme {name!r}: one of {', '.join(PRESET_ACTIVATIONS)}") from None


def is_preset(name: Any) -> bool:
    """Whether ``name`` is a preset scheme of compressed-tensors 0.19 (any case)."""
    return isinstance(name, str) and (name.upper() in PRESET_SCHEMES or name.upper() in UNSUPPORTED_PRESETS)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def complete_args(raw: Mapping[str, Any], where: str = "") -> tuple[dict[str, Any], bool]:
    """One ``QuantizationArgs`` mapping completed as compressed-tensors validates it (see the
    module docstring), and whether its ``observer`` was written (not null). Raises
    ``ValueError`` with compressed-tensors' reason where it would refuse the arguments."""
    at = f"{where}: " if where else ""
    unknown = sorted(set(raw) - set(ARG_FIELDS))
    if unknown:
        raise ValueError(f"{at}unknown quantization argument(s) {', '.join(map(str, unknown))} "
                         f"(QuantizationArgs has {', '.join(ARG_FIELDS)})")
    out = {k: copy.deepcopy(raw.get(k, _DEFAULTS[k])) for k in ARG_FIELDS}
    if out["observer_kwargs"] is None:
        out["observer_kwargs"] = {}
    for key in ("type", "strategy", "dynamic", "actorder"):
        out[key] = _lower(out[key])
    out["actorder"] = _checked_actorder(out["actorder"], at)
    if out["type"] not in ("int", "float"):
        raise ValueError(f"{at}type must be int or float, got {out['type']!r}")
    size, strategy = out["group_size"], out["strategy"]
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < -1):
        raise ValueError(f"{at}invalid group_size {size!r}: use group_size > 0 for strategy 'group' and "
                         "-1 for 'channel'")
    if strategy is None:
        strategy = "tensor" if size is None else "group" if size > 0 else "channel" if size == -1 else None
        if strategy is None:
            raise ValueError(f"{at}invalid group_size {size!r}")
    if strategy == "token" and not out["dynamic"]:
        raise ValueError(f"{at}static token quantization does not exist: set dynamic: true")
    if strategy in ("group", "tensor_group") and (size is None or size <= 0):
        raise ValueError(f"{at}strategy {strategy!r} needs a positive group_size")
    if size is not None and size > 0 and strategy not in ("group", "tensor_group"):
        raise ValueError(f"{at}group_size {size} needs strategy 'group', not {strategy!r}")
    if out["dynamic"] and strategy not in ("token", "tensor", "tensor_group", "group"):
        raise ValueError(f"{at}dynamic quantization needs strategy token, tensor or group, not {strategy!r}")
    out["strategy"] = strategy
    if out["zp_dtype"] is None and not out["symmetric"]:
        out["zp_dtype"] = "torch.float8_e4m3fn" if out["type"] == "float" else "torch.int8"
    written = raw.get("observer") is not None
    return out, written


def _observer(args: dict[str, Any], written: bool, default: str) -> None:
    """llm-compressor's ``_apply_observer_overrides`` without overrides."""
    if not written:
        args["observer"] = None if args["dynamic"] is True else default


def _scheme(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(raw) - set(_SCHEME_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown QuantizationScheme field(s) {', '.join(map(str, unknown))} "
                         f"(it has {', '.join(_SCHEME_FIELDS)})")
    targets = raw.get("targets")
    if isinstance(targets, str):
        targets = [targets]
    if not targets:
        raise ValueError(f"{where}: a QuantizationScheme needs targets (e.g. targets: [Linear])")
    out: dict[str, Any] = {"targets": [str(t) for t in targets]}
    for slot, default in (("weights", "memoryless_minmax"), ("input_activations", "minmax"),
                          ("output_activations", "minmax")):
        value = raw.get(slot)
        if value is None:
            out[slot] = None
            continue
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}.{slot}: a QuantizationArgs mapping or null, got {value!r}")
        args, written = complete_args(value, f"{where}.{slot}")
        if slot != "weights" and args["actorder"] is not None:
            raise ValueError(f"{where}.{slot}: actorder applies to weights only")
        if slot == "input_activations" and args["strategy"] not in ("token", "tensor", "group", "tensor_group",
                                                                     "attn_head"):
            raise ValueError(f"{where}.{slot}: strategy {args['strategy']!r} does not exist for activations")
        _observer(args, written, default)
        out[slot] = args
    out["format"] = raw.get("format")
    return out


def _preset(name: str, targets: list[str]) -> dict[str, Any]:
    key = name.upper()
    if key not in PRESET_SCHEMES:
        raise ValueError(f"preset scheme {name!r} is not run by recipe_spec.oneshot (its grid is not an int "
                         "or FP8 grid with tensor, channel or group scales)" if key in UNSUPPORTED_PRESETS
                         else f"unknown preset scheme {name!r}")
    return _scheme({"targets": targets, **copy.deepcopy(PRESET_SCHEMES[key])}, f"scheme {name}")


def _checked_actorder(value: Any, at: str = "") -> str | None:
    """``value`` as compressed-tensors 0.19's ``ActivationOrdering`` reads it (lower case; False
    is null), or ``ValueError`` for the values it refuses."""
    value = _lower(value)
    if isinstance(value, bool):
        if value:
            raise ValueError(f"{at}actorder: true meant 'group', removed in compressed-tensors 0.19; "
                             "write actorder: weight (or static), or null")
        return None
    if value in ("group", "dynamic"):
        raise ValueError(f"{at}actorder {value!r} was removed in compressed-tensors 0.19; "
                         "write actorder: weight (or static), or null")
    if value not in (None, "weight", "static"):
        raise ValueError(f"{at}actorder must be weight, static or null, got {value!r}")
    return value


def _actorder(existing: Any, modifier: Any, given: bool) -> Any:
    """llm-compressor 0.14's ``GPTQModifier.resolve_actorder``."""
    if not given:
        return "static" if existing is None else existing
    modifier = _checked_actorder(modifier)
    same = {modifier, existing} <= {"static", "weight"} or modifier == existing
    if existing is None or same:
        return modifier
    raise ValueError(f"GPTQModifier actorder {modifier!r} differs from the actorder {existing!r} of a "
                     "config group: remove one of them")


def resolve_config(args: Mapping[str, Any], *, gptq: bool = False) -> dict[str, Any]:
    """The ``QuantizationConfig`` (as ``model_dump()``) of a QuantizationModifier (or, with
    ``gptq``, a GPTQModifier) with arguments ``args``. Raises ``ValueError`` where
    llm-compressor or compressed-tensors refuse the arguments."""
    scheme, groups = args.get("scheme"), args.get("config_groups")
    targets = args.get("targets", ["Linear"])
    targets = [targets] if isinstance(targets, str) else list(targets or [])
    if scheme is not None and groups is not None:
        raise ValueError("give either `scheme` or `config_groups`, not both")
    resolved: dict[str, Any] = {}
    if scheme is not None:
        if isinstance(scheme, str):
            scheme = {scheme: targets}
        if not isinstance(scheme, Mapping):
            raise ValueError(f"`scheme` must be a preset name or a mapping {{preset: targets}}, got {scheme!r}")
        for i, (name, group_targets) in enumerate(scheme.items()):
            if not is_preset(name):
                raise ValueError(f"unknown preset scheme {name!r}")
            group_targets = [group_targets] if isinstance(group_targets, str) else list(group_targets or [])
            resolved[f"group_{i}"] = _preset(str(name), group_targets)
    elif groups:
        if not isinstance(groups, Mapping):
            raise ValueError(f"`config_groups` must map group names to schemes, got {groups!r}")
        for name, group in groups.items():
            if not isinstance(group, Mapping):
                raise ValueError(f"config_groups.{name}: a QuantizationScheme mapping, got {group!r}")
            resolved[str(name)] = _scheme(group, f"config_groups.{name}")
    else:
        raise ValueError("give `scheme` (a preset such as W4A16) or `config_groups`: without them nothing "
                         "is quantized")
    if gptq:
        for group in resolved.values():
            weights = group["weights"]
            if weights is not None and weights["strategy"] in ("group", "tensor_group", "channel", "tensor",
                                                               "block"):
                weights["actorder"] = _actorder(weights["actorder"], args.get("actorder"), "actorder" in args)
    ignore = args.get("ignore") or []
    return {"config_groups": resolved, "quant_method": "compressed-tensors", "kv_cache_scheme": None,
            "format": "fakequant", "quantization_status": "initialized", "global_compression_ratio": None,
            "ignore": [ignore] if isinstance(ignore, str) else [str(i) for i in ignore]}
