"""A Hugging Face checkpoint compressed one block at a time: the model is built without its
weights, and each repeated block (``model.layers.<i>``) is brought from the safetensors shards
when the run needs it and put back on the meta device when it needs the next one, so the host
memory holds one block's weights (plus the layers outside the blocks: embeddings, final norm,
head) whatever the depth.

- :func:`streamed_model`: the model of a checkpoint folder, built with ``init_empty_weights``
  (buffers real, parameters on the meta device), the layers outside the blocks read at once,
  and a :class:`BlockStore` attached (:func:`store_of`); None when the folder cannot be
  streamed (no safetensors, a compressed checkpoint, names the model does not have), and the
  caller loads it whole.
- :class:`BlockStore`: where each block's weights are between uses: the checkpoint until the
  run changes the block, then a scratch safetensors file of its own (a temporary folder,
  removed with the model). One block is resident at a time; a forward pass brings each block
  in as it reaches it (a forward pre-hook), so the model still runs as a whole (the calibration
  capture, whole-model passes, a user's generation after the run).
- transformers 5's fused experts (:mod:`.experts`): the linearised experts' weights are sliced
  from the checkpoint's fused tensors on the block's first load, or read by name where the
  checkpoint stores one tensor per expert.
- The folder is written block by block too (:mod:`.shards`).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import torch

__all__ = ["BlockStore", "Checkpoint", "streamed_model", "store_of", "own_tensors", "trim_memory", "module_list_blocks",
           "STORE"]

#: The model attribute holding its :class:`BlockStore`.
STORE = "_recipe_spec_blocks"
_EXPERT = re.compile(r"^(.*)\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|bias)$")


def store_of(model: Any) -> BlockStore | None:
    """The :class:`BlockStore` of a streamed model, None for a model held whole."""
    store = getattr(model, STORE, None)
    return store if isinstance(store, BlockStore) else None


class Checkpoint:
    """The safetensors shards of a folder: which file holds each tensor (the files as the
    core's checkpoint reader finds and checks them: the index's shards inside the folder)."""

    def __init__(self, folder: str) -> None:
        from recipe_spec.params.checkpoint import read_checkpoint
        from recipe_spec.params.headers import read_safetensors_header

        files = read_checkpoint(folder, classes=False).files
        self.files = {name: os.fspath(f) for f in files for name in read_safetensors_header(f, check_data=False)}

    def read(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """The tensors ``names``, each file opened once."""
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for n in names:
            by_file.setdefault(self.files[n], []).append(n)
        out: dict[str, torch.Tensor] = {}
        for file, keys in by_file.items():
            with safe_open(file, framework="pt") as f:
                for k in keys:
                    out[k] = f.get_tensor(k)
        return out


def own_tensors(module: torch.nn.Module, prefix: str) -> Iterator[tuple[str, torch.nn.Module, str, torch.Tensor]]:
    """``(full name, owner, key, tensor)`` of every parameter and persistent buffer under ``module``."""
    for mname, m in module.named_modules(prefix=prefix):
        for key, p in m._parameters.items():
            if p is not None:
                yield f"{mname}.{key}", m, key, p
        for key, b in m._buffers.items():
            if b is not None and key not in m._non_persistent_buffers_set:
                yield f"{mname}.{key}", m, key, b


def _put(owner: torch.nn.Module, key: str, value: torch.Tensor) -> None:
    if key in owner._parameters:
        owner._parameters[key] = torch.nn.Parameter(value, requires_grad=False)
    else:
        owner._buffers[key] = value


class BlockStore:
    """The weights of a streamed model's blocks (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, checkpoint: Checkpoint, blocks: Sequence[str]) -> None:
        self.model = model
        self.checkpoint = checkpoint
        self.blocks = list(blocks)
        self.resident: str | None = None
        self.dirty = False
        self.loads = 0
        self._scratch = tempfile.mkdtemp(prefix="recipe-spec-blocks-")
        self._written: set[str] = set()
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._scratch, True)
        self._hooks = [model.get_submodule(b).register_forward_pre_hook(self._pre_hook(b)) for b in self.blocks]

    def _pre_hook(self, block: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            self.ensure(block)
        return hook

    def block_of(self, name: str) -> str | None:
        """The block holding module (or tensor) ``name``, None outside every block."""
        for b in self.blocks:
            if name == b or name.startswith(b + "."):
                return b
        return None

    def ensure(self, name: str, dirty: bool = False) -> None:
        """Make the block holding ``name`` resident (the one before put back first); ``dirty``:
        the caller will change it."""
        block = self.block_of(name)
        if block is None:
            return
        if block != self.resident:
            self.release()
            self._load(block)
        self.dirty = self.dirty or dirty

    def release(self) -> None:
        """Put the resident block back: to its scratch file when it changed, then on the meta device."""
        block = self.resident
        if block is None:
            return
        module = self.model.get_submodule(block)
        if self.dirty:
            from safetensors.torch import save_file

            state = {name: t.detach().contiguous() for name, _, _, t in own_tensors(module, block)}
            save_file(state, self._file(block))
            self._written.add(block)
        for _, owner, key, t in list(own_tensors(module, block)):
            _put(owner, key, torch.empty_like(t, device="meta"))
        self.resident, self.dirty = None, False
        trim_memory()

    def _file(self, block: str) -> str:
        return os.path.join(self._scratch, block.replace("/", "_") + ".safetensors")

    def _load(self, block: str) -> None:
        module = self.model.get_submodule(block)
        wanted = list(own_tensors(module, block))
        if block in self._written:
            from safetensors.torch import load_file

            values = load_file(self._file(block))
        else:
            values = self._from_checkpoint(block, [n for n, *_ in wanted])
        for name, owner, key, t in wanted:
            value = values.get(name)
            if value is None:  # created by the run (a quantization scale not yet written)
                value = torch.zeros(t.shape, dtype=t.dtype)
            _put(owner, key, value.to(t.dtype) if value.dtype != t.dtype else value)
        self.resident, self.dirty = block, False
        self.loads += 1

    def _from_checkpoint(self, block: str, names: Sequence[str]) -> dict[str, torch.Tensor]:
        direct = [n for n in names if n in self.checkpoint.files]
        values = self.checkpoint.read(direct)
        fused = {m.group(1) for m in (_EXPERT.match(n) for n in names if n not in values) if m is not None}
        for experts in sorted(fused):
            values.update(_sliced(self.model.get_submodule(experts), experts, self.checkpoint))
        return values

    def non_finite(self) -> list[str]:
        """The floating-point tensors holding NaN or infinity: the layers outside the blocks as
        they are, the blocks' as their checkpoint has them (read one tensor at a time)."""
        from safetensors import safe_open

        bad = [n.lstrip(".") for n, _, _, t in own_tensors(self.model, "")
               if self.block_of(n.lstrip(".")) is None and not t.is_meta and t.is_floating_point()
               and not bool(torch.isfinite(t.detach()).all())]
        by_block: dict[tuple[str, str], list[str]] = {}
        for name, file in self.checkpoint.files.items():
            block = self.block_of(name)
            if block is not None:
                by_block.setdefault((block, file), []).append(name)
        for (_, file), names in by_block.items():  # a file opened per block: its pages read stay mapped while open
            with safe_open(file, framework="pt") as f:
                for name in names:
                    t = f.get_tensor(name)
                    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                        bad.append(name)
        return bad

    def close(self) -> None:
        """Remove the hooks and the scratch folder (the model's blocks stay on the meta device)."""
        for h in self._hooks:
            h.remove()
        self._finalizer()


def _libc() -> Any:
    """glibc through ctypes, False elsewhere."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 (glibc only)
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def trim_memory() -> None:
    """Give the memory freed by a block back to the system (glibc keeps freed heap pages
    otherwise, and the resident set grows block after block); nothing elsewhere."""
    if _libc():
        _libc().malloc_trim(0)


def _bounded_heap() -> None:
    """glibc's threshold above which an allocation gets pages of its own, fixed at 64 KiB
    (``M_MMAP_THRESHOLD``): a block's tensors then go back to the system when freed, instead
    of the threshold rising with each freed tensor and the heap growing in pieces."""
    if _libc():
        _libc().mallopt(-3, 65536)


_LIBC: Any = None


def _sliced(linear: Any, name: str, checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """Each expert's weights of a linearised experts module ``name``, sliced from the
    checkpoint's fused tensors (``<name>.gate_up_proj`` ...) by :mod:`.experts`' own copy."""
    from .experts import LinearExperts

    fused_names = [f"{name}.{k}" for k in ("gate_up_proj", "up_proj", "down_proj", "gate_up_proj_bias",
                                           "up_proj_bias", "down_proj_bias") if f"{name}.{k}" in checkpoint.files]
    fused = SimpleNamespace(**{n.rsplit(".", 1)[1]: t for n, t in checkpoint.read(fused_names).items()})
    gated = hasattr(fused, "gate_up_proj")
    first = fused.gate_up_proj if gated else fused.up_proj
    transposed = bool(linear.is_transposed)
    intermediate = int(fused.down_proj.shape[1] if transposed else fused.down_proj.shape[2])
    bias = hasattr(fused, "down_proj_bias")
    out: dict[str, torch.Tensor] = {}
    for index in range(int(first.shape[0])):
        expert = copy.deepcopy(linear[index]).to_empty(device="cpu")
        with torch.no_grad():
            LinearExperts._copy(fused, index, expert, gated, transposed, intermediate, bias)
        for key, t in expert.state_dict().items():
            out[f"{name}.{index}.{key}"] = t
    return out


def module_list_blocks(named: Iterable[tuple[str, torch.nn.Module]]) -> list[str]:
    """The children of the ModuleList of identical modules holding the most parameters (a
    decoder's layers), by name; [] without one."""
    best: tuple[int, list[str]] = (-1, [])
    for name, module in named:
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 2 and len({type(c) for c in module}) == 1:
            size = sum(p.numel() for p in module.parameters())
            if size > best[0]:
                prefix = f"{name}." if name else ""
                best = (size, [f"{prefix}{i}" for i in range(len(module))])
    return best[1]


def _expected(model: torch.nn.Module, checkpoint: Checkpoint) -> str | None:
    """Why the checkpoint's names do not cover the model's (None: every tensor found, the
    linearised experts' in the checkpoint's fused tensors)."""
    seen: set[int] = set()
    for name, _, _, tensor in own_tensors(model, ""):
        name = name.lstrip(".")
        if id(tensor) in seen:
            continue  # tied to a tensor named before (the head to the input embedding)
        seen.add(id(tensor))
        if name in checkpoint.files:
            continue
        m = _EXPERT.match(name)
        if m is not None and any(f"{m.group(1)}.{k}" in checkpoint.files for k in ("gate_up_proj", "up_proj")):
            continue
        return f"the checkpoint has no tensor {name}"
    return None


def streamed_model(path: str, config: Any, dtype: Any, trust_remote_code: bool = False) -> torch.nn.Module | None:
    """The causal-LM model of checkpoint folder ``path`` with its blocks streamed (see the
    module docstring), or None when it cannot be (the caller loads it whole)."""
    import transformers
    from accelerate import init_empty_weights

    if getattr(config, "quantization_config", None) is not None:
        return None  # a compressed checkpoint is decompressed by transformers on load
    from recipe_spec.params.checkpoint import CheckpointError
    from recipe_spec.params.headers import ModelSpecError

    try:
        checkpoint = Checkpoint(path)
    except (CheckpointError, ModelSpecError, OSError, ValueError):
        return None  # transformers says what is wrong with it, loading it whole
    if not checkpoint.files:
        return None
    if dtype == "auto":
        dtype = _checkpoint_dtype(config, checkpoint)
    with init_empty_weights(include_buffers=False):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
    from .experts import linearize

    try:  # transformers' fused experts as one Linear per expert, as the run compresses them
        linearize(model, True)
    except ValueError:
        return None  # a layout the run refuses, with its message, once the model is loaded whole
    model.tie_weights()
    blocks = module_list_blocks(model.named_modules())
    if not blocks or _expected(model, checkpoint) is not None:
        return None
    outside = [(n.lstrip("."), owner, key, t) for n, owner, key, t in own_tensors(model, "")
               if not any(n.lstrip(".").startswith(b + ".") for b in blocks)]
    values = checkpoint.read([n for n, *_ in outside if n in checkpoint.files])
    for name, owner, key, t in outside:
        value = values.get(name)
        if value is None:
            continue  # tied: set by tie_weights below
        _put(owner, key, value.to(t.dtype))
    model.tie_weights()
    missing = [n for n, *_ in own_tensors(model, "") if not any(n.lstrip(".").startswith(b + ".") for b in blocks)
               and _is_meta(model, n.lstrip("."))]
    if missing:
        return None
    model.eval()
    _bounded_heap()
    store = BlockStore(model, checkpoint, blocks)
    setattr(model, STORE, store)
    return model


def _is_meta(model: torch.nn.Module, name: str) -> bool:
    owner, key = name.rsplit(".", 1)
    t = model.get_submodule(owner)._parameters.get(key)
    return t is not None and t.is_meta


def _checkpoint_dtype(config: Any, checkpoint: Checkpoint) -> torch.dtype:
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(declared, torch.dtype):
        return declared
    if isinstance(declared, str) and isinstance(getattr(torch, declared, None), torch.dtype):
        return getattr(torch, declared)
    first = next(iter(checkpoint.files))
    return checkpoint.read([first])[first].dtype
