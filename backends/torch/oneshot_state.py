"""What the PyTorch calibration host (:mod:`.oneshot`) tells the one-shot checks before a run
and what it keeps to undo one, mirroring the Keras host's module of the same name.

**Before** (:mod:`recipe_spec.oneshot.preflight`): :meth:`ModelState.describe` reads an
array of a calibration sample (shape, integer or not, smallest and largest value);
:meth:`~ModelState.input_limits` the vocabulary size (the input embedding's rows) and the
positions (``config.max_position_embeddings``); :meth:`~ModelState.non_finite` the parameters
holding NaN or infinity; :meth:`~ModelState.quantized_names` the modules already quantized
(a compressed-tensors scheme, or packed/quantized weights loaded from a compressed
checkpoint); :meth:`~ModelState.chain_break` whether each repeated block is fed the one
before's output. A model on the meta device is refused when the host is made.

**Undo** (:mod:`recipe_spec.oneshot.journal`): :meth:`~ModelState.keep` copies a module's own
parameters into host memory before their first change and :meth:`~ModelState.put_back`
writes them back; :meth:`~ModelState.shell` records, for every module, its parameters,
buffers, submodules, hooks and attributes (references, no tensor copied), and
:meth:`~ModelState.restore_shell` removes whatever was added since (compressed-tensors'
``quantization_scheme``, ``weight_scale``, the wrapped ``forward``, packed weights) and puts
back what was replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from recipe_spec.oneshot.data_checks import ArrayFacts

__all__ = ["ModelState", "refuse_meta"]

#: Parameters a module loaded from a compressed checkpoint holds in place of ``weight``.
_QUANTIZED_PARAMS = ("weight_packed", "weight_scale", "weight_global_scale")


def refuse_meta(model: torch.nn.Module) -> None:
    """A ValueError for a model whose weights are on the meta device (never loaded) or not
    initialised yet (lazy modules before their first forward pass)."""
    lazy = [n for n, p in model.named_parameters() if isinstance(p, torch.nn.parameter.UninitializedParameter)]
    if lazy:
        raise ValueError(f"the model's lazy modules are not initialised ({lazy[0]} has no shape yet): run one "
                         "forward pass of a batch first, so that they take their shapes")
    meta = [n for n, p in model.named_parameters() if p.is_meta]
    if meta:
        raise ValueError(f"the model's weights are on the meta device (not loaded: {meta[0]} and "
                         f"{len(meta) - 1} more); load the checkpoint's weights first "
                         "(from_pretrained without device_map='meta' or init_empty_weights)")


def _kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point():
        return "float"
    if t.is_complex():
        return "other"
    return "int"


def _configs(model: torch.nn.Module) -> list[Any]:
    """The model's config and its text config (where ``tie_word_embeddings`` is read)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "tie_word_embeddings"):
        return []
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    return [config] if text is config or not hasattr(text, "tie_word_embeddings") else [config, text]


class ModelState:
    """The host's part described in the module docstring (``model`` and ``_named``: the model
    and its ``named_modules``)."""

    model: torch.nn.Module
    _named: dict[str, torch.nn.Module]

    def _forward(self, batch: Any) -> None:  # the host's own
        raise NotImplementedError
    _tied_ids: set[int] | None = None

    def _ensure(self, name: str, dirty: bool = False) -> None:
        """Make module ``name`` resident (a streamed model's block); nothing otherwise."""

    # -- before --------------------------------------------------------------------------------
    def describe(self, value: Any) -> ArrayFacts | None:
        if value is None or isinstance(value, (str, bytes, dict)):
            return None
        try:
            t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, device="cpu")
        except (TypeError, ValueError, RuntimeError):
            return None
        kind = _kind(t)
        low = high = None
        if t.numel() and kind != "other":
            flat = t.detach().reshape(-1)
            flat = flat.to(torch.int64) if kind == "bool" else flat
            low, high = float(flat.min()), float(flat.max())
        return ArrayFacts(tuple(int(d) for d in t.shape), kind, str(t.dtype).removeprefix("torch."), low, high)

    def input_limits(self) -> tuple[int | None, int | None]:
        vocab = None
        get = getattr(self.model, "get_input_embeddings", None)
        try:
            embedding = get() if callable(get) else None
        except (NotImplementedError, AttributeError):
            embedding = None
        if isinstance(embedding, torch.nn.Embedding):
            vocab = int(embedding.num_embeddings)
        config = getattr(self.model, "config", None)
        if vocab is None and isinstance(getattr(config, "vocab_size", None), int):
            vocab = int(config.vocab_size)  # type: ignore[union-attr]
        positions = getattr(config, "max_position_embeddings", None)
        return vocab, int(positions) if isinstance(positions, int) and positions > 0 else None

    def non_finite(self) -> list[str]:
        from .streaming import store_of

        store = store_of(self.model)
        if store is not None:  # the blocks read from the checkpoint, one tensor at a time
            return store.non_finite()
        return [n for n, p in self.model.named_parameters()
                if p.is_floating_point() and not bool(torch.isfinite(p.detach()).all())]

    def quantized_names(self) -> list[str]:
        out = []
        for name, module in self._named.items():
            if getattr(module, "quantization_scheme", None) is not None or any(
                    isinstance(getattr(module, p, None), torch.Tensor) for p in _QUANTIZED_PARAMS):
                out.append(name)
        return out

    def quantized_now(self) -> list[str]:
        return [n for n, m in self._named.items() if getattr(m, "quantization_scheme", None) is not None]

    # -- tied weights --------------------------------------------------------------------------
    def own_weight(self, module: torch.nn.Module) -> None:
        """Give ``module`` a copy of a weight it shares with another module (tied input and output
        embeddings) before the run changes it, so that the other keeps its values, and record in
        the config that the embeddings are untied (llm-compressor's ``untie_word_embeddings``,
        which it runs when a quantization modifier targets an embedding). A failed run puts the
        shared weight and the config back (:meth:`shell`)."""
        weight = module._parameters.get("weight")
        if weight is None:
            return
        if self._tied_ids is None:  # the weights more than one module holds, found once
            seen: dict[int, int] = {}
            for m in self.model.modules():
                p = m._parameters.get("weight")
                if p is not None:
                    seen[id(p)] = seen.get(id(p), 0) + 1
            self._tied_ids = {k for k, n in seen.items() if n > 1}
        if id(weight) not in self._tied_ids:
            return
        module.register_parameter("weight", torch.nn.Parameter(weight.detach().clone(),
                                                               requires_grad=weight.requires_grad))
        for config in _configs(self.model):
            config.tie_word_embeddings = False

    # -- undo ----------------------------------------------------------------------------------
    def chain_break(self, blocks: Sequence[str], batch: Any) -> tuple[str, str] | None:
        """The first two consecutive ``blocks`` of which the second is not fed the first's
        output in one forward pass of ``batch`` (or that the pass does not run); None when each
        block takes the one before's output, as the sequential pipeline feeds them."""
        seen: dict[str, tuple[Any, Any]] = {}

        def first(value: Any) -> Any:
            return value[0] if isinstance(value, (tuple, list)) and value else value

        def pre(name: str) -> Any:
            def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                entry = args[0] if args else kwargs.get("hidden_states")
                seen.setdefault(name, (entry, None))
            return hook

        def post(name: str) -> Any:
            def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
                if name in seen and seen[name][1] is None:
                    seen[name] = (seen[name][0], first(output))
            return hook

        handles = [self._named[b].register_forward_pre_hook(pre(b), with_kwargs=True) for b in blocks]
        handles += [self._named[b].register_forward_hook(post(b)) for b in blocks]
        try:
            self._forward(batch)
        finally:
            for handle in handles:
                handle.remove()
        for a, b in zip(blocks, blocks[1:], strict=False):
            out, entry = seen.get(a, (None, None))[1], seen.get(b, (None, None))[0]
            if not (isinstance(out, torch.Tensor) and isinstance(entry, torch.Tensor)):
                return a, b
            if entry is not out and (entry.shape != out.shape or not torch.equal(entry, out)):
                return a, b
        return None

    def keep(self, name: str) -> dict[str, torch.Tensor]:
        self._ensure(name)
        module = self._named[name]
        return {k: p.detach().to("cpu", copy=True) for k, p in module._parameters.items() if p is not None}

    def put_back(self, name: str, kept: dict[str, torch.Tensor]) -> None:
        self._ensure(name, dirty=True)
        module = self._named[name]
        for key, value in kept.items():
            param = module._parameters.get(key)
            if param is not None:
                param.data.copy_(value.to(param.device))

    def shell(self) -> list[tuple[torch.nn.Module, dict[str, Any], list[tuple[dict[Any, Any], dict[Any, Any]]]]]:
        out = []
        for module in [*self.model.modules(), *_configs(self.model)]:  # the configs: tie_word_embeddings
            attrs = dict(module.__dict__)
            dicts = [(v, dict(v)) for v in attrs.values() if isinstance(v, dict)]
            out.append((module, attrs, dicts))
        return out

    def restore_shell(self, shell: Sequence[tuple[torch.nn.Module, dict[str, Any],
                                                  list[tuple[dict[Any, Any], dict[Any, Any]]]]]) -> None:
        for module, attrs, dicts in shell:
            for key in [k for k in module.__dict__ if k not in attrs]:
                del module.__dict__[key]
            module.__dict__.update(attrs)
            for live, content in dicts:
                live.clear()
                live.update(content)
        self._named = dict(self.model.named_modules())
        self._quantizing = False
