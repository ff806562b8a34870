"""The PyTorch calibration host of the one-shot pipeline
(:class:`recipe_spec.oneshot.host.CalibrationHost`): forward hooks that hand each observed
layer's input to the core, the cache of a block's inputs, one block run on cached inputs, and
weights read and written. The pipeline itself lives in :mod:`recipe_spec.oneshot`.

Held as a context manager: the model runs in eval mode, under ``torch.no_grad()``, without a
KV cache (``use_cache=False``) and with eager attention (a Hugging Face model), as
llm-compressor calibrates; its mode and config are restored on exit. Quantized results are
recorded and saved through compressed-tensors (:mod:`.compressed`).

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
>>> with TorchCalibrationHost(model) as host:
...     [(m.name, m.prunable) for m in host.modules()][:2]
[('', False), ('0', True)]
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from recipe_spec.atomic import replacing, write_text
from recipe_spec.oneshot.host import (
    CallRecorder,
    ModuleInfo,
    ObservedCalls,
    Observer,
    StopForward,
    feed_until,
    observed_call,
)
from recipe_spec.oneshot.matching import matches

from .autoround import AutoRoundTuning
from .expert_pruning import ExpertPruning
from .experts import LinearExperts, linearize, restore
from .masks import TORCH_OPS
from .oneshot_state import ModelState, refuse_meta
from .rotations import Rotations
from .streaming import module_list_blocks, store_of

__all__ = ["TorchCalibrationHost"]


def _move(x: Any, device: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, tuple):
        return tuple(_move(v, device) for v in x)
    if isinstance(x, list):
        return [_move(v, device) for v in x]
    if isinstance(x, dict):
        return {k: _move(v, device) for k, v in x.items()}
    return x


def _length(x: Any) -> int:
    return int(x.shape[-1]) if hasattr(x, "shape") else len(x)


class TorchCalibrationHost(Rotations, ExpertPruning, AutoRoundTuning, ModelState):
    """A ``torch.nn.Module`` held for one-shot compression (see the module docstring)."""

    ops = TORCH_OPS
    #: One solve at a time: the column loop sets torch's (process-wide) thread count to one, and
    #: MKL does not promise a factorisation the same bits on another thread count.
    solves_ahead = False
    #: llm-compressor's ``moe_calibrate_all_experts``: every expert sees every token while
    #: statistics are gathered (:mod:`.experts`); set before the context is entered
    calibrate_all_experts = True

    def __init__(self, model: torch.nn.Module):
        self._store = store_of(model)
        if self._store is None:
            refuse_meta(model)
        self.model = model
        self._fused: list[tuple[str, torch.nn.Module]] = []
        self._named = dict(model.named_modules())
        self._state: tuple[bool, Any] | None = None
        self._no_grad: Any = None
        self._quantizing = False
        self._attention: Any = None
        self._wrap: tuple[str, Any] | None = None
        self.device = next((p.device for p in model.parameters() if not p.is_meta), torch.device("cpu"))
        try:
            params = inspect.signature(model.forward).parameters
            self._use_cache = "use_cache" in params or any(
                p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        except (TypeError, ValueError):
            self._use_cache = False

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> TorchCalibrationHost:
        config = getattr(self.model, "config", None)
        self._state = (self.model.training, getattr(config, "use_cache", None))
        if config is not None and hasattr(config, "use_cache"):
            config.use_cache = False
        # llm-compressor calibrates with eager attention (calibration_forward_context); sdpa
        # gives other float32 sums, which GPTQ's rounding decisions can amplify
        self._attention = getattr(config, "_attn_implementation", None)
        if self._attention is not None:
            config._attn_implementation = "eager"
        self.model.eval()
        self._no_grad = torch.no_grad()
        self._no_grad.__enter__()
        # fused experts become one Linear per expert and projection, as llm-compressor runs them
        # (a failed run puts the fused modules back in __exit__; a finished one keeps the Linears)
        for module in self.model.modules():  # a streamed checkpoint's experts, split when it was read
            if isinstance(module, LinearExperts):
                module.calibrate_all = self.calibrate_all_experts
        try:
            self._fused = linearize(self.model, self.calibrate_all_experts)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        if self._fused:
            self._named = dict(self.model.named_modules())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._no_grad.__exit__(*exc)
        if self._fused and exc[0] is not None:
            restore(self.model, self._fused)
            self._named = dict(self.model.named_modules())
        self._fused = []
        if self._quantizing:
            from .compressed import finish

            finish(self.model)
        training, use_cache = self._state or (False, None)
        self.model.train(training)
        config = getattr(self.model, "config", None)
        if config is not None and use_cache is not None:
            config.use_cache = use_cache
        if self._attention is not None:
            self._restore_attention(config, failed=exc[0] is not None)
        if self._wrap is not None and exc[0] is None:
            from .saving import install

            install(self.model, *self._wrap)

    # -- the model -------------------------------------------------------------------------------
    def modules(self) -> list[ModuleInfo]:
        out = []
        for name, module in self._named.items():
            classes = tuple(c.__name__ for c in type(module).__mro__
                            if isinstance(c, type) and issubclass(c, torch.nn.Module))
            prunable = isinstance(module, torch.nn.Linear)
            out.append(ModuleInfo(name, classes, prunable, tuple(module.weight.shape) if prunable else ()))
        return out

    def repeated_blocks(self, sequential_targets: Sequence[str] | None) -> list[str]:
        if sequential_targets:
            return [n for n, m in self._named.items()
                    if n and any(matches(t, n, (type(m).__name__,)) for t in sequential_targets)]
        blocks = module_list_blocks(self._named.items())
        if blocks:
            return blocks
        classes = set(getattr(self.model, "_no_split_modules", None) or ())
        return [n for n, m in self._named.items() if n and type(m).__name__ in classes]

    # -- data ----------------------------------------------------------------------------------
    def lengths(self, samples: Sequence[Mapping[str, Any]]) -> list[int]:
        return [_length(s["input_ids"]) for s in samples]

    def order_longest_first(self, lengths: Sequence[int]) -> list[int]:
        return torch.argsort(torch.tensor(list(lengths), device="cpu"), descending=True).tolist()

    def collate(self, samples: Sequence[Mapping[str, Any]], length: int) -> dict[str, torch.Tensor]:
        batch = {}
        for key in samples[0]:
            rows = [torch.as_tensor(s[key], device=self.device).reshape(-1)[:length] for s in samples]
            batch[key] = torch.stack(rows)
        return batch

    def _forward(self, batch: Any) -> None:
        extra = {"use_cache": False} if self._use_cache else {}
        if isinstance(batch, Mapping):
            batch = _move(dict(batch), self.device)
            ids = batch.get("input_ids")
            if isinstance(ids, torch.Tensor) and ids.dtype not in (torch.int64, torch.int32):
                batch["input_ids"] = ids.long()  # uint8, int16: ids all the same, as an embedding takes them
            self.model(**batch, **extra)
        else:
            self.model(_move(batch, self.device))

    # -- running ---------------------------------------------------------------------------------
    def capture(self, block: str, batches: Sequence[Any], offload: bool) -> list[Any]:
        calls: list[Any] = []
        where = torch.device("cpu") if offload else None

        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            calls.append(_move((args, kwargs), where) if where is not None else (args, kwargs))
            raise StopForward

        handle = self._named[block].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            feed_until(self._forward, batches, block)
        finally:
            handle.remove()
        return calls

    def _hooks(self, observers: Mapping[str, Observer], outputs: Mapping[str, Observer] | None = None,
               calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False,
               seen: ObservedCalls | None = None) -> list[Any]:
        def hook_for(name: str, observe: Observer) -> Any:
            def hook(module: Any, inputs: tuple[Any, ...]) -> None:
                x = inputs[0]
                sequences = int(x.shape[0]) if x.dim() > 2 else 1
                observe(x.reshape(-1, x.shape[-1]).float(), sequences)
                if seen is not None:
                    seen.called(name)
            return hook

        def output_hook_for(observe: Observer) -> Any:
            def hook(module: Any, inputs: tuple[Any, ...], output: Any) -> None:
                y = output[0] if isinstance(output, (tuple, list)) else output
                sequences = int(y.shape[0]) if y.dim() > 2 else 1
                observe(y.reshape(-1, y.shape[-1]).float(), sequences)
            return hook

        def call_hook_for(record: CallRecorder, where: Any) -> Any:
            def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                record(_move((args, kwargs), where) if where is not None else (args, kwargs))
            return hook

        handles = [self._named[name].register_forward_pre_hook(hook_for(name, obs)) for name, obs in observers.items()]
        handles += [self._named[name].register_forward_hook(output_hook_for(obs))
                    for name, obs in (outputs or {}).items()]
        where = torch.device("cpu") if offload_calls else None
        handles += [self._named[name].register_forward_pre_hook(call_hook_for(rec, where), with_kwargs=True)
                    for name, rec in (calls or {}).items()]
        return handles

    def run_block(self, block: str, inputs: Sequence[Any], observers: Mapping[str, Observer],
                  propagate: bool, outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False,
                  routes: Mapping[str, Any] | None = None) -> list[Any]:
        module = self._named[block]
        # a calibration pass needs the observed layers' inputs only: once each has had its
        # input, the rest of the block is not run (ObservedCalls)
        seen = (ObservedCalls(list(observers)) if ObservedCalls.apply(propagate, observers, outputs or routes, calls)
                else None)
        handles = self._hooks(observers, outputs, calls, offload_calls, seen) + self.route_hooks(routes or {})
        out: list[Any] = []
        try:
            for call in inputs:
                args, kwargs = call
                offloaded = any(isinstance(a, torch.Tensor) and a.device != self.device for a in args) or any(
                    isinstance(v, torch.Tensor) and v.device != self.device for v in kwargs.values())
                if offloaded:
                    args, kwargs = _move((args, kwargs), self.device)
                whole, result = observed_call(seen, module, *args, **kwargs)
                if not whole or not propagate:
                    continue
                hidden = result[0] if isinstance(result, (tuple, list)) else result
                if args:
                    nxt = ((hidden, *args[1:]), kwargs)
                else:
                    nxt = (args, {**kwargs, "hidden_states": hidden})
                out.append(_move(nxt, torch.device("cpu")) if offloaded else nxt)
        finally:
            for h in handles:
                h.remove()
        return out

    def run_model(self, batches: Sequence[Any], observers: Mapping[str, Observer],
                  outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False,
                  routes: Mapping[str, Any] | None = None) -> None:
        handles = self._hooks(observers, outputs, calls, offload_calls) + self.route_hooks(routes or {})
        try:
            for batch in batches:
                self._forward(batch)
        finally:
            for h in handles:
                h.remove()

    def run_module(self, name: str, calls: Sequence[Any]) -> list[torch.Tensor]:
        self._ensure(name)
        module = self._named[name]
        out = []
        for args, kwargs in calls:
            args, kwargs = _move((args, kwargs), self.device)
            result = module(*args, **kwargs)
            y = result[0] if isinstance(result, (tuple, list)) else result
            out.append(y.float())
        return out

    def wrap_save(self, recipe_text: str, processor: Any = None) -> None:
        """Once the run ends without an error, ``model.save_pretrained(dir, save_compressed=True)``
        writes what ``output_dir=`` writes (``recipe_text`` as ``recipe.yaml``, ``processor``
        beside it), as llm-compressor's wrapped ``save_pretrained`` (:mod:`.saving`)."""
        self._wrap = (recipe_text, processor)

    # -- several processes (:mod:`.distributed`) ---------------------------------------------
    def collective(self) -> Any:
        from .distributed import collective

        return collective()

    def share(self, name: str, src: int) -> None:
        from .distributed import share_module

        self._ensure(name, dirty=True)
        share_module(self._named[name], src)

    # -- weights and saving --------------------------------------------------------------------
    @property
    def streamed(self) -> bool:
        """Whether the model's blocks come one at a time from its checkpoint (:mod:`.streaming`)."""
        return self._store is not None

    def _ensure(self, name: str, dirty: bool = False) -> None:
        if self._store is not None:
            self._store.ensure(name, dirty)

    def weight(self, name: str) -> torch.Tensor:
        w = self.observed(name)
        return w if w.dtype == torch.float32 else w.float()

    def observed(self, name: str) -> torch.Tensor:
        self._ensure(name)
        w = self._named[name].weight.detach()
        with self.ops.serial(w):  # a copy: the same bits on one thread, and no wait on a busy core
            return w.clone()

    def set_weight(self, name: str, value: torch.Tensor) -> None:
        self._ensure(name, dirty=True)
        self.own_weight(self._named[name])
        w = self._named[name].weight
        w.data.copy_(value.reshape(w.shape).to(w.dtype))

    def bias(self, name: str) -> torch.Tensor | None:
        self._ensure(name)
        b = getattr(self._named[name], "bias", None)
        return b.detach().float().clone() if isinstance(b, torch.Tensor) else None

    def set_bias(self, name: str, value: torch.Tensor) -> None:
        self._ensure(name, dirty=True)
        b = self._named[name].bias
        b.data.copy_(value.reshape(b.shape).to(b.dtype))

    def attach_quantization(self, config: Mapping[str, Any]) -> None:
        from .compressed import attach

        attach(self.model, config)
        self._quantizing = True
        for name in self.quantized_now():
            self.own_weight(self._named[name])

    def _restore_attention(self, config: Any, failed: bool) -> None:
        """The model's own attention implementation back; where compressed-tensors hooked the
        attention during the run (SpinQuant's R3), the hooks kept, around that implementation."""
        hooked = "ct_hooked_attention"
        if failed or config._attn_implementation != hooked:
            config._attn_implementation = self._attention
            return
        from compressed_tensors.modeling.attention import QuantizedAttentionImpl
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        if self._attention != hooked:
            QuantizedAttentionImpl._original_impl = self._attention
            ALL_MASK_ATTENTION_FUNCTIONS.register(hooked, ALL_MASK_ATTENTION_FUNCTIONS[self._attention])

    def set_quantized(self, name: str, weight: torch.Tensor | None, qparams: Mapping[str, Any]) -> None:
        from .compressed import record

        self._ensure(name, dirty=True)
        record(self._named[name], name, weight, qparams)  # untied when its scheme was attached

    def save_problem(self, quantized: bool) -> str | None:
        """Why :meth:`save` could not save the model once it is quantized (``quantized``), or
        None: compressed-tensors saves a Hugging Face model (one with ``save_pretrained``)."""
        if quantized and not callable(getattr(self.model, "save_pretrained", None)):
            return (f"a quantized model is saved through compressed-tensors, which needs a Hugging Face model "
                    f"(save_pretrained); this {type(self.model).__name__} has none")
        return None

    @contextlib.contextmanager
    def _saved_config(self) -> Any:
        """The model's own ``use_cache`` and attention implementation while it is saved (the
        run switches them off for calibration; the folder keeps the checkpoint's)."""
        config = getattr(self.model, "config", None)
        use_cache = self._state[1] if self._state is not None else None
        now = (getattr(config, "use_cache", None), getattr(config, "_attn_implementation", None))
        if config is not None and use_cache is not None:
            config.use_cache = use_cache
        if config is not None and self._attention is not None:
            config._attn_implementation = self._attention
        try:
            yield
        finally:
            if config is not None and use_cache is not None:
                config.use_cache = now[0]
            if config is not None and self._attention is not None:
                config._attn_implementation = now[1]

    def save(self, output_dir: str, recipe_text: str) -> list[str]:
        problem = self.save_problem(self._quantizing)
        if problem is not None:
            raise ValueError(f"{problem}: save it yourself")
        os.makedirs(output_dir, exist_ok=True)
        written = []
        from .compressed import original_save

        save = original_save(self.model)
        if self._store is not None:  # one block at a time
            from .shards import save_streamed

            with self._saved_config():
                save_streamed(self.model, self._store, output_dir, self._quantizing)
            written += sorted(os.path.join(output_dir, f) for f in os.listdir(output_dir))
        elif callable(save):
            from .compressed import save as save_compressed

            with self._saved_config():
                if not (self._quantizing and save_compressed(self.model, output_dir)):
                    save(output_dir)
            written += sorted(os.path.join(output_dir, f) for f in os.listdir(output_dir))
        else:
            path = os.path.join(output_dir, "pytorch_model.bin")
            with replacing(path) as tmp:
                torch.save(self.model.state_dict(), tmp)
            written.append(path)
        recipe_path = os.path.join(output_dir, "recipe.yaml")
        write_text(recipe_path, recipe_text)
        return sorted(set(written) | {recipe_path})
