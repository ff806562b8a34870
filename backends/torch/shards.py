"""A streamed model (:mod:`.streaming`) written into a Hugging Face folder one block at a time,
in the files ``save_pretrained`` writes: ``model.safetensors`` when the weights fit in one
shard of ``max_shard_size``, else ``model-0000i-of-0000n.safetensors`` and
``model.safetensors.index.json``; ``config.json`` (with compressed-tensors'
``quantization_config`` for a quantized model) and ``generation_config.json``.

Each block is brought in, copied, its quantized modules compressed on the copy
(compressed-tensors' ``compress_module`` in the format ``ModelCompressor`` infers, as
:func:`.compressed.save` compresses the whole model) and written to a part file; the parts are
then joined into the shards by copying their bytes (:func:`join`), so no more than one block is
in memory at any time. The model itself stays as it was (uncompressed), so it can run or be
saved again.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import struct
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from .streaming import STORE, BlockStore, own_tensors, trim_memory

__all__ = ["save_streamed", "join", "install_save"]

_COPY = 1 << 24


def save_streamed(model: torch.nn.Module, store: BlockStore, output_dir: str, quantized: bool,
                  quantization_format: str | None = None, compress: bool = True,
                  max_shard_size: int | str | None = None) -> list[str]:
    """Write ``model`` into ``output_dir`` (see the module docstring); the files written.
    ``quantized``: through compressed-tensors (``quantization_format`` as
    :func:`.compressed.save` takes it; ``compress=False``: the weights as they are, in the
    ``dense`` format)."""
    from safetensors.torch import save_file
    from transformers.utils.hub import convert_file_size_to_int

    limit = convert_file_size_to_int(max_shard_size if max_shard_size is not None else "50GB")
    compressor = _compressor(model, quantization_format, compress) if quantized else None
    store.release()
    parts = tempfile.mkdtemp(prefix=".parts-", dir=output_dir)
    try:
        files = [os.path.join(parts, "outside.safetensors")]
        save_file(_outside(model, store, compressor), files[0], metadata={"format": "pt"})
        for i, block in enumerate(store.blocks):
            store.ensure(block)
            state = _compress_copy(copy.deepcopy(model.get_submodule(block)), compressor)
            files.append(os.path.join(parts, f"{i:06d}.safetensors"))
            save_file({f"{block}.{k}": v.contiguous() for k, v in state.items()}, files[-1],
                      metadata={"format": "pt"})
            del state
            trim_memory()
        store.release()
        for old in os.listdir(output_dir):  # a previous save's shards
            if old.startswith("model") and (old.endswith(".safetensors") or old.endswith(".safetensors.index.json")):
                os.remove(os.path.join(output_dir, old))
        join(files, output_dir, limit)
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    model.config.save_pretrained(output_dir)
    generation = getattr(model, "generation_config", None)
    if generation is not None and callable(getattr(model, "can_generate", None)) and model.can_generate():
        generation.save_pretrained(output_dir)
    if compressor is not None:
        compressor.finish(output_dir)
    return [os.path.join(output_dir, f) for f in sorted(os.listdir(output_dir))]


class _Compressor:
    """compressed-tensors' ``ModelCompressor`` of the model and whether it packs the weights."""

    def __init__(self, real: Any, compress: bool) -> None:
        self.real = real
        self.compress = compress

    def finish(self, output_dir: str) -> None:
        if self.compress and self.real.quantization_config is not None:
            from compressed_tensors.quantization import QuantizationStatus

            self.real.quantization_config.quantization_status = QuantizationStatus.COMPRESSED
        self.real.update_config(output_dir)


def _compressor(model: torch.nn.Module, quantization_format: str | None, compress: bool) -> _Compressor:
    from compressed_tensors import ModelCompressor

    from .compressed import finish

    finish(model)
    if not compress and quantization_format is None:
        quantization_format = "dense"
    return _Compressor(ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format),
                       compress)


def _compress_copy(module: torch.nn.Module, compressor: _Compressor | None) -> dict[str, torch.Tensor]:
    """The state of ``module`` (a copy, compressed in place where quantized)."""
    if compressor is not None and compressor.compress:
        from compressed_tensors.compressors.base import compress_module

        for m in module.modules():
            if getattr(m, "quantization_scheme", None) is not None:
                compress_module(m, compressor.real.force_compression_format)
    return {k: v.detach() for k, v in module.state_dict().items()}


def _outside(model: torch.nn.Module, store: BlockStore, compressor: _Compressor | None) -> dict[str, torch.Tensor]:
    """The tensors outside the blocks (a tied one once), quantized modules' compressed on copies."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    owners: dict[str, torch.nn.Module] = {}
    for name, owner, _, t in own_tensors(model, ""):
        name = name.lstrip(".")
        if store.block_of(name) is None and id(t) not in seen:
            seen.add(id(t))
            out[name] = t.detach().contiguous()
            owners[name.rsplit(".", 1)[0] if "." in name else ""] = owner
    if compressor is None or not compressor.compress:
        return out
    for prefix, owner in owners.items():
        if getattr(owner, "quantization_scheme", None) is None:
            continue
        for k in [k for k in out if (k.rsplit(".", 1)[0] if "." in k else "") == prefix]:
            del out[k]
        out.update({f"{prefix}.{k}": v.contiguous() for k, v in _compress_copy(copy.deepcopy(owner), compressor).items()
                    if "." not in k})
    return out


def _header(path: str) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size)), 8 + size


def join(parts: Sequence[str], output_dir: str, limit: int) -> list[str]:
    """Join safetensors ``parts`` into shards of at most ``limit`` bytes of tensors (a tensor
    larger than ``limit`` alone in its shard), named as transformers names them, with the index
    when there is more than one; tensors in the parts' order, bytes copied, not loaded."""
    tensors: list[tuple[str, dict[str, Any], str, int]] = []
    for part in parts:
        header, start = _header(part)
        header.pop("__metadata__", None)
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            tensors.append((name, info, part, start))
    shards: list[list[tuple[str, dict[str, Any], str, int]]] = [[]]
    size = 0
    for entry in tensors:
        n = entry[1]["data_offsets"][1] - entry[1]["data_offsets"][0]
        if shards[-1] and size + n > limit:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += n
    names = ["model.safetensors"] if len(shards) == 1 else [
        f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    total = 0
    weight_map: dict[str, str] = {}
    for shard, file in zip(shards, names, strict=True):
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, info, _, _ in shard:
            n = info["data_offsets"][1] - info["data_offsets"][0]
            header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = file
        total += offset
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(output_dir, file), "wb") as out:
            out.write(struct.pack("<Q", len(text)) + text)
            for _, info, part, start in shard:
                begin, end = info["data_offsets"]
                with open(part, "rb") as src:
                    src.seek(start + begin)
                    left = end - begin
                    while left:
                        chunk = src.read(min(_COPY, left))
                        out.write(chunk)
                        left -= len(chunk)
    if len(names) > 1:
        with open(os.path.join(output_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    return [os.path.join(output_dir, n) for n in names]


def install_save(model: torch.nn.Module) -> None:
    """Give a streamed ``model`` a ``save_pretrained`` that writes it block by block."""
    store = getattr(model, STORE)
    ref = weakref.ref(model)

    def save_pretrained(save_directory: str | os.PathLike[str], max_shard_size: Any = None,
                        safe_serialization: bool = True) -> None:
        """Write the model into ``save_directory`` one block at a time, in shards of at most
        ``max_shard_size`` (transformers' size strings; default 50GB, as transformers)."""
        if not safe_serialization:
            raise ValueError("a streamed model is written as safetensors shards only: leave safe_serialization at True")
        target = ref()
        assert target is not None  # the bound function keeps the model alive
        os.makedirs(save_directory, exist_ok=True)
        save_streamed(target, store, os.fspath(save_directory), quantized=False, max_shard_size=max_shard_size)

    model.save_pretrained = save_pretrained  # type: ignore[method-assign]
