"""Quantized one-shot results on a PyTorch model, through compressed-tensors 0.19 itself (the
library llm-compressor 0.14 saves with): the calibration host's
``attach_quantization`` / ``set_quantized`` and the compressed save.

- :func:`attach`: ``apply_quantization_config`` with the resolved config, as llm-compressor's
  ``QuantizationMixin.initialize_quantization`` does (its ``re:`` targets matched in linear
  time: :func:`_linear_matching`); each quantized ``Linear`` gets its
  ``quantization_scheme`` and its ``weight_scale`` / ``weight_zero_point`` (int8, or FP8 for
  FP8 grids) / ``input_scale`` / ``input_zero_point`` parameters in compressed-tensors' shapes;
  quantization is switched off until the pipeline ends (:func:`finish`);
- :func:`record`: the values the core computed, cast into those parameters;
- :func:`finish`: as llm-compressor leaves a model after one shot: status frozen and
  quantization on (a forward pass fake-quantizes weights and activations);
- :func:`save`: ``ModelCompressor.from_pretrained_model`` (the format inferred per module:
  ``pack-quantized``, ``int-quantized``, ``float-quantized``), ``compress_model``,
  ``save_pretrained`` and ``update_config``, as llm-compressor's ``save_pretrained`` wrapper.
  As there, the model stays compressed in memory afterwards and decompresses itself at its
  next forward pass.

compressed-tensors is imported here only, when a recipe quantizes; without it the run stops
before any weight changes (:func:`_ct`, called first by :func:`attach`) with the command that
installs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from recipe_spec.text.targets import regex_match

__all__ = ["attach", "record", "finish", "quantized", "save", "installed", "original_save", "MARK"]

#: The attribute that marks ``save_pretrained`` as :mod:`.saving`'s wrapper.
MARK = "_recipe_spec_save"


def _ct() -> Any:
    try:
        import compressed_tensors
    except ImportError:
        from recipe_spec.diagnostics.packages import MissingPackageError

        raise MissingPackageError("compressed_tensors", "quantization in recipe_spec.oneshot on PyTorch "
                                  "(QuantizationModifier, GPTQModifier)") from None
    return compressed_tensors


def quantized(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules carrying a compressed-tensors quantization scheme."""
    return [m for m in model.modules() if getattr(m, "quantization_scheme", None) is not None]


def attach(model: torch.nn.Module, config: Mapping[str, Any]) -> None:
    """Attach the schemes of a resolved ``QuantizationConfig`` mapping (see the module
    docstring), quantization off."""
    _ct()
    from compressed_tensors.quantization import (
        QuantizationConfig,
        apply_quantization_config,
        disable_quantization,
    )

    parsed = QuantizationConfig.model_validate(dict(config))
    with _linear_matching():
        _refuse_other_modules(model, parsed)
        apply_quantization_config(model, parsed, show_progress=False)
    model.apply(disable_quantization)


#: The module types whose quantized results the host records and saves.
_HELD = (torch.nn.Linear, torch.nn.Embedding)


def _refuse_other_modules(model: torch.nn.Module, config: Any) -> None:
    """``NotImplementedError`` naming the first module a config group would quantize that is
    neither a Linear nor an Embedding (an attention module's inputs, say: compressed-tensors'
    attention hooks need llm-compressor's own calibration), before anything is attached."""
    from compressed_tensors.utils import match_named_modules

    for name, scheme in config.config_groups.items():
        for module_name, module in match_named_modules(model, scheme.targets, config.ignore):
            if not isinstance(module, _HELD):
                raise NotImplementedError(
                    f"config group {name} targets {module_name} ({type(module).__name__}); recipe_spec.oneshot "
                    "quantizes Linear and Embedding layers only")


class _LinearRe:
    """The ``re`` module as compressed-tensors' matcher sees it while the schemes are attached:
    ``match`` of a module-name pattern (its ``match_name``: ``re.match(target[3:], name)``)
    runs on recipe-spec's linear-time matcher, with the same answer; the rest is ``re``."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def match(self, pattern: Any, string: Any, flags: int = 0) -> Any:
        if flags or not isinstance(pattern, str) or not isinstance(string, str):
            return self._real.match(pattern, string, flags)
        return True if regex_match("re:" + pattern, string) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextlib.contextmanager
def _linear_matching() -> Iterator[None]:
    """compressed-tensors matches ``re:`` targets with Python's backtracking ``re.match``,
    which a pattern with nested repetition (``re:(a+)+$``) keeps busy for hours on a long
    name; for the duration, its matcher module's ``re`` is :class:`_LinearRe`."""
    from compressed_tensors.utils import match as ct_match

    real = getattr(ct_match, "re", None)
    if real is None:  # another layout of compressed-tensors: leave it as it is
        yield
        return
    ct_match.re = _LinearRe(real)
    try:
        yield
    finally:
        ct_match.re = real


def record(module: torch.nn.Module, name: str, weight: torch.Tensor | None, qparams: Mapping[str, Any]) -> None:
    """Write ``weight`` (unless None) and each quantization parameter of ``qparams`` into
    ``module`` (named ``name`` in messages), in the parameters' own dtypes and shapes."""
    if getattr(module, "quantization_scheme", None) is None:
        raise ValueError(f"{name} has no quantization scheme: attach_quantization() did not select it")
    for key, value in qparams.items():
        param = getattr(module, key, None)
        if not isinstance(param, torch.Tensor):
            raise ValueError(f"{name} has no {key} (compressed-tensors created none for its scheme)")
        value = torch.as_tensor(value)
        if value.numel() != param.numel():
            raise ValueError(f"{name}.{key}: {list(value.shape)} values for a parameter of shape {list(param.shape)}")
        param.data.copy_(value.reshape(param.shape).to(device=param.device, dtype=param.dtype))
    if weight is not None:
        w = module.weight
        w.data.copy_(weight.reshape(w.shape).to(w.dtype))


def finish(model: torch.nn.Module) -> None:
    """Status frozen and quantization on for every module with a scheme (nothing to do
    without one)."""
    modules = quantized(model)
    if not modules:
        return
    from compressed_tensors.quantization import QuantizationStatus, enable_quantization

    for m in modules:
        if getattr(m, "quantization_status", None) != QuantizationStatus.COMPRESSED:
            m.quantization_status = QuantizationStatus.FROZEN
    model.apply(enable_quantization)


def save(model: torch.nn.Module, output_dir: str, save: Any = None, quantization_format: str | None = None,
         compress: bool = True, max_shard_size: int | str | None = None) -> bool:
    """Save a quantized Hugging Face model compressed (see the module docstring); False (and
    nothing written) when no module is quantized. ``save``: the function that writes the
    model into ``output_dir`` (default ``model.save_pretrained``); ``quantization_format``:
    compressed-tensors' format instead of the one it infers; ``compress=False``: the weights
    are written as they are, in the ``dense`` format (llm-compressor's
    ``save_compressed=False``). A streamed model is written by :mod:`.shards` instead."""
    if not quantized(model):
        return False
    from compressed_tensors import ModelCompressor

    finish(model)
    if not compress and quantization_format is None:
        quantization_format = "dense"
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format)
    if compress:
        with _this_process_only():
            compressor.compress_model(model, skip_compressed=True)
    if save is None:
        save = original_save(model)
    save(output_dir)
    compressor.update_config(output_dir)
    return True


@contextlib.contextmanager
def _this_process_only() -> Iterator[None]:
    """compressed-tensors compresses in this process alone, even under ``torch.distributed``
    (where it would share the modules out with processes that are not saving)."""
    from compressed_tensors.compressors.model_compressors import model_compressor

    real = model_compressor.is_distributed
    model_compressor.is_distributed = lambda: False
    try:
        yield
    finally:
        model_compressor.is_distributed = real


def installed(model: torch.nn.Module) -> bool:
    """Whether ``model.save_pretrained`` is :mod:`.saving`'s wrapper."""
    return getattr(getattr(model, "save_pretrained", None), MARK, False)


def original_save(model: torch.nn.Module) -> Any:
    """``model.save_pretrained`` as transformers has it (under :mod:`.saving`'s wrapper)."""
    current = getattr(model, "save_pretrained", None)
    return getattr(current, "__wrapped__", current) if installed(model) else current
