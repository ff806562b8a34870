"""AutoRound on the PyTorch calibration host (a base of :class:`~.oneshot.TorchCalibrationHost`):
one decoder block tuned by auto-round itself (``AutoRound.quantize_block``, the entry point
auto-round keeps for llm-compressor), as llm-compressor 0.14's ``AutoRoundModifier`` calls it:

- the block alone is handed to ``AutoRound`` (wrapped as ``model.layers[0]``, so auto-round finds
  one block), with the modifier's ``iters``, ``lr``, ``batch_size``, ``enable_torch_compile``,
  ``disable_opt_rtn``, the scheme (a preset auto-round knows by name, else :func:`_ar_scheme`:
  bits, symmetry, group size, data type and static activations), the layers of the block
  quantized otherwise than the first config group (``layer_config``) and those of its Linear
  layers the recipe leaves out (``ignore_layers``);
- its calibration inputs are the block's cached calls, right-padded to the longest (each
  padded position left out of auto-round's loss by a validity mask), each call's attention mask
  otherwise reduced to which query positions count, with the last position of a fully valid row
  marked invalid, as llm-compressor hands them over; the quantized input of the block before
  (auto-round's ``q_input``) is carried from block to block;
- afterwards each quantized Linear's weight is its dequantized grid value and what auto-round
  left on it is recorded under compressed-tensors' names (``set_quantized``, :func:`_tuned`): the
  scale (MX's from its log2), zero point, NVFP4's global scales, FP8's static input scale; the
  block's other parameters are put back in their own dtype, values and ``requires_grad`` (the
  weights take no gradient while auto-round tunes; it runs the block in bfloat16 on a CPU and
  leaves it so: llm-compressor's float32 model comes back with bfloat16 norms), and every
  attribute, parameter and buffer auto-round added is removed. A failure halfway puts the whole
  block back as it was.

auto-round is imported here only (``pip install auto-round``: the ``autoround`` extra).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.utils._pytree import tree_map

__all__ = ["AutoRoundTuning", "pad_calls", "validity"]

#: compressed-tensors' quantization parameters, kept aside while auto-round runs (llm-compressor
#: clears them too) and written back with auto-round's values.
_QPARAMS = ("weight_scale", "weight_zero_point", "weight_global_scale", "weight_g_idx", "input_scale",
            "input_zero_point", "input_global_scale", "output_scale", "output_zero_point")


def _length(args: tuple[Any, ...]) -> int | None:
    x = args[0] if args else None
    return int(x.shape[1]) if isinstance(x, torch.Tensor) and x.ndim >= 2 else None


def _padded(value: Any, length: int, longest: int, fill: float) -> Any:
    """``value`` with each tensor whose sequence axis (0 for a vector, else 1) holds ``length``
    positions padded with ``fill`` to ``longest``."""
    def pad(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.ndim >= 1:
            axis = 0 if x.ndim == 1 else 1
            if x.shape[axis] == length:
                shape = list(x.shape)
                shape[axis] = longest - length
                return torch.cat([x, x.new_full(shape, fill)], dim=axis)
        return x
    return tree_map(pad, value)


def _padded_mask(mask: Any, length: int, longest: int) -> Any:
    """An attention mask padded to ``longest``: an integer one with zeros; a float (additive) one
    with the dtype's minimum along the keys, so no query attends to a padded key, and zeros along
    the queries, so a padded query row is not wholly masked."""
    if not isinstance(mask, torch.Tensor) or longest <= length:
        return mask
    if not mask.is_floating_point():
        return _padded(mask, length, longest, 0)
    lowest = torch.finfo(mask.dtype).min
    for axis in range(mask.ndim):
        if mask.shape[axis] == length:
            shape = list(mask.shape)
            shape[axis] = longest - length
            mask = torch.cat([mask, mask.new_full(shape, lowest if axis == mask.ndim - 1 else 0.0)], dim=axis)
    return mask


def pad_calls(calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> tuple[list[Any], list[torch.Tensor] | None]:
    """The block's calls right-padded to the longest, and per call a ``[1, longest]`` mask of its
    own positions (None when every call has one length, or a length cannot be read)."""
    lengths = [_length(args) for args, _ in calls]
    if any(n is None for n in lengths) or len(set(lengths)) <= 1:
        return list(calls), None
    longest = max(n for n in lengths if n is not None)
    out, masks = [], []
    for (args, kwargs), n in zip(calls, lengths, strict=True):
        assert n is not None
        out.append((tuple(_padded(a, n, longest, 0.0) for a in args),
                    {k: v if k == "past_key_values" else _padded_mask(v, n, longest) if k == "attention_mask"
                     else _padded(v, n, longest, 0.0) for k, v in kwargs.items()}))
        mask = torch.ones((1, longest), dtype=torch.long)
        mask[:, n:] = 0
        masks.append(mask)
    return out, masks


def validity(mask: Any) -> torch.Tensor:
    """Which query positions of a call count in auto-round's loss: a ``[batch, seq]`` mask as
    given, a causal one (``[batch, heads, q, k]`` or ``[batch, q, k]``, additive or boolean)
    reduced to the rows that attend anywhere; a row that is valid throughout has its last
    position marked invalid (auto-round's calibration expects one)."""
    m = torch.as_tensor(mask).clone()
    if m.shape[-1] == 0:
        return m
    if m.ndim == 4 and m.shape[1] == 1 and m.shape[2] == 1:
        m = m.squeeze(2).squeeze(1)
    if m.ndim in (3, 4):
        m = m[:, 0] if m.ndim == 4 else m
        m = m.any(dim=-1) if m.dtype == torch.bool else (m.amax(dim=-1) > m.amin()).to(torch.long)
    if m.ndim == 1:
        if torch.all(m == 1):
            m[-1] = 0
        return m
    full = torch.all(m == 1, dim=1)
    if torch.any(full):
        m[full, -1] = 0
    return m


class _OneBlock(torch.nn.Module):
    """A block as the only layer of a model (``model.layers[0]``), which auto-round tunes."""

    def __init__(self, block: torch.nn.Module, config: Any) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([block])
        self.config = config
        self.name_or_path = ""
        self.dtype = next(block.parameters()).dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model.layers[0](*args, **kwargs)  # type: ignore[index]


def _ar_type(args: Any) -> str:
    """auto-round's data type of compressed-tensors' arguments: ``int``, ``fp`` (FP8), ``nv_fp``
    (NVFP4's groups of 16 under a global scale) or ``mx_fp`` (MX's power-of-two group scales)."""
    if args.type != "float":
        return str(args.type)
    if args.strategy == "tensor_group":
        return "nv_fp"
    return "mx_fp" if args.mx else "fp"


def _ar_scheme(group: Any) -> dict[str, Any]:
    """auto-round's scheme of a config group, as llm-compressor translates one (dynamic input
    activations left to the model's run: ``act_bits`` 16), with 4-bit float weights as auto-round's
    own ``nv_fp`` / ``mx_fp`` types and NVFP4's inputs as auto-round's NVFP4 preset has them."""
    def size(args: Any) -> int:
        return int(args.group_size) if args.strategy in ("group", "tensor_group") else \
            -1 if args.strategy == "channel" else 0

    weights, inputs = group.weights, group.inputs
    out = {"bits": int(weights.num_bits), "sym": bool(weights.symmetric), "group_size": size(weights),
           "data_type": _ar_type(weights), "act_bits": 16, "act_group_size": None, "act_sym": None,
           "act_dynamic": None, "act_data_type": None}
    if inputs is not None and inputs.strategy == "tensor_group":  # NVFP4's: a calibrated global scale
        out.update(act_bits=4, act_group_size=16, act_sym=True, act_dynamic=True,
                   act_data_type="nv_fp4_with_static_gs")
    elif inputs is not None:  # static per tensor
        out.update(act_bits=int(inputs.num_bits), act_group_size=0, act_sym=bool(inputs.symmetric),
                   act_dynamic=False, act_data_type="fp" if inputs.type == "float" else str(inputs.type))
    return out


def _tuned(layer: torch.nn.Module, group: Any, registered: Any) -> dict[str, torch.Tensor]:
    """What auto-round left on a tuned Linear under compressed-tensors' names, those of them
    compressed-tensors registered for its scheme (``registered``): ``weight_scale`` (MX's log2
    scales as scales), ``weight_zero_point`` (compressed-tensors' symmetric grid centred on 0;
    auto-round's asymmetric one on ``[0, 2^bits - 1]``), ``weight_global_scale``, ``input_scale``
    (static inputs) and ``input_global_scale`` (NVFP4's, ``448 * 6 / act_max``)."""
    from auto_round.data_type.nvfp import FLOAT4_E2M1_MAX, FLOAT8_E4M3_MAX, get_reciprocal

    def read(key: str) -> torch.Tensor | None:  # in auto-round's dtype (its act_max is the block's)
        value = getattr(layer, key, None)
        return None if value is None else torch.as_tensor(value).detach().clone()

    weights = group.weights
    scale = read("scale")
    if scale is None:
        raise ValueError("auto-round did not quantize it")
    out = {"weight_scale": torch.exp2(scale.float()) if _ar_type(weights) == "mx_fp" else scale.float()}
    if "weight_zero_point" in registered:
        zero = read("zp")
        out["weight_zero_point"] = torch.zeros_like(out["weight_scale"]) if weights.symmetric or zero is None else \
            zero.float() - 2 ** (int(weights.num_bits) - 1)
    for key, theirs in (("weight_global_scale", "weight_global_scale"), ("input_scale", "act_scale"),
                        ("input_global_scale", "act_max")):
        value = read(theirs)
        if key in registered and value is not None:  # NVFP4's input global scale from act_max in its dtype
            out[key] = (FLOAT8_E4M3_MAX * FLOAT4_E2M1_MAX * get_reciprocal(value) if theirs == "act_max"
                        else value).float()
    missing = sorted(set(registered) & {"weight_global_scale", "input_scale", "input_global_scale"} - set(out))
    if missing:
        raise ValueError(f"auto-round left no value for its {', '.join(missing)}")
    return out


class AutoRoundTuning:
    """The host's AutoRound (see the module docstring); ``model``, ``_named``: the host's."""

    model: torch.nn.Module
    _named: dict[str, torch.nn.Module]

    def check_tuning(self) -> None:
        """A ValueError saying how to install auto-round when it does not import."""
        try:
            import auto_round  # noqa: F401
        except ImportError as exc:
            raise ValueError(f"AutoRoundModifier runs through auto-round, which does not import here ({exc}): "
                             "pip install 'recipe-spec[autoround]' (auto-round 0.15)") from None

    def tune_block(self, block: str, calls: list[Any], names: list[str], schemes: dict[str, Any], default: Any,
                   settings: Any, carry: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
        """Tune block ``block`` on its cached ``calls``: ``names`` (its Linear layers quantized,
        full names) with ``schemes[name]`` (their config groups; ``default``: the modifier's
        first, auto-round's scheme, the others its ``layer_config``); ``settings``: the
        modifier's (:class:`recipe_spec.oneshot.autoround.Tuning`); ``carry``: auto-round's
        quantized output of the block before (``q_input``), updated. Returns each quantized
        layer's weight (dequantized) and its quantization parameters under compressed-tensors'
        names (:func:`_tuned`), recorded by the caller; the block is left as it was but for those."""
        from auto_round import AutoRound
        from auto_round.schemes import PRESET_SCHEMES
        from auto_round.schemes import QuantizationScheme as Scheme

        module = self._named[block]
        assert isinstance(module, torch.nn.Module)
        prefix = f"{block}."
        kept = {n: (p, p.detach().clone()) for n, p in module.named_parameters()}
        grads = {n: p.requires_grad for n, p in module.named_parameters()}
        module.requires_grad_(False)  # auto-round tunes its own values; the weights take no gradient
        own = {n: (set(m._parameters), set(m._buffers)) for n, m in module.named_modules()}
        kept_buffers = {n: (b, b.detach().clone()) for n, b in module.named_buffers()}  # type: ignore[attr-defined]
        attrs = {n: set(vars(m)) for n, m in module.named_modules()}
        qparams: dict[str, dict[str, Any]] = {}
        for name in names:  # compressed-tensors' parameters aside while auto-round runs
            layer = self._named[name]
            qparams[name] = {k: layer._parameters.pop(k) for k in _QPARAMS if k in layer._parameters}
        local = {n[len(prefix):]: n for n in names}
        linears = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
        default = _ar_scheme(default)
        try:
            wrapped = _OneBlock(module, getattr(self.model, "config", None))
            layer_config = {f"model.layers.0.{n}": _ar_scheme(schemes[full]) for n, full in local.items()
                            if _ar_scheme(schemes[full]) != default}
            skip = [f"model.layers.0.{n}" for n in linears if n not in local]
            with torch.enable_grad():
                preset = settings.preset if settings.preset in PRESET_SCHEMES else None
                ar = AutoRound(model=wrapped, tokenizer="", scheme=preset or Scheme(**default),
                               layer_config=layer_config or None, iters=settings.iters, lr=settings.lr,
                               enable_torch_compile=settings.compile, batch_size=settings.batch_size,
                               device_map=None, ignore_layers=",".join(skip), disable_opt_rtn=settings.disable_opt_rtn,
                               low_gpu_mem_usage=True)
                ar.configure_layer_config(enable_gguf_official_mixed=False)
                ar.batch_dim = 0
                padded, masks = pad_calls(list(calls))
                self._set_masks(ar, module, padded, masks)
                device = next(module.parameters()).device
                module.tuning_device = device
                carry["q_input"], _ = ar.quantize_block(block=module, inputs=[((a, k),) for a, k in padded],
                                                        q_input=carry.get("q_input"), device=str(device),
                                                        auto_offload=False)
            out = {}
            for short, full in local.items():
                layer = module.get_submodule(short)
                layer = getattr(layer, "orig_layer", layer)
                try:
                    out[full] = _tuned(layer, schemes[full], qparams[full])
                except ValueError as exc:
                    raise ValueError(f"{full}: {exc}") from None
                weight = layer.weight
                assert isinstance(weight, torch.Tensor)
                out[full]["weight"] = weight.detach().float().clone()
        except BaseException:
            self._put_block_back(module, kept, kept_buffers, attrs, qparams, own, grads)
            raise
        self._put_block_back(module, kept, kept_buffers, attrs, qparams, own, grads)
        return out

    @staticmethod
    def _set_masks(ar: Any, block: torch.nn.Module, calls: list[Any], masks: list[torch.Tensor] | None) -> None:
        if masks is not None:
            ar.attention_mask = [validity(m) for m in masks]
            return
        signature = inspect.signature(block.forward)
        found = []
        for args, kwargs in calls:
            try:
                mask = signature.bind_partial(*args, **kwargs).arguments.get("attention_mask")
            except TypeError:
                mask = kwargs.get("attention_mask")
            if mask is not None:
                found.append(validity(mask))
        if found:
            ar.attention_mask = found

    def _put_block_back(self, module: torch.nn.Module, kept: dict[str, Any], buffers: dict[str, Any],
                        attrs: dict[str, set[str]], qparams: dict[str, dict[str, Any]],
                        own: dict[str, tuple[set[str], set[str]]], grads: dict[str, bool]) -> None:
        """Every Linear auto-round wrapped unwrapped, every parameter and buffer its own object
        with its dtype, values and ``requires_grad``, every attribute, parameter and buffer it
        added removed (``own``: each module's before; FP8's ``act_max_scale`` would otherwise be
        saved, a tensor no loader reads), compressed-tensors' parameters back."""
        for name, child in list(module.named_modules()):
            original = getattr(child, "orig_layer", None)
            if isinstance(original, torch.nn.Module) and name:
                module.set_submodule(name, original)
        for name, (param, value) in kept.items():
            param.data = value
            owner, _, key = name.rpartition(".")
            holder = module.get_submodule(owner) if owner else module
            holder._parameters[key] = param
        for name, (_, value) in buffers.items():
            owner, _, key = name.rpartition(".")
            holder = module.get_submodule(owner) if owner else module
            holder._buffers[key] = value
        for name, child in module.named_modules():
            for key in set(vars(child)) - attrs.get(name, set(vars(child))):
                del vars(child)[key]  # not delattr: a Module's goes to a parameter of the same name first
            params, bufs = own.get(name, (set(child._parameters), set(child._buffers)))
            for key in set(child._parameters) - params:
                del child._parameters[key]
            for key in set(child._buffers) - bufs:
                del child._buffers[key]
        for name, param in module.named_parameters():
            param.requires_grad_(grads.get(name, param.requires_grad))
        for name, params in qparams.items():
            self._named[name]._parameters.update(params)
        self._named = dict(self.model.named_modules())
