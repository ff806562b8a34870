"""``model.save_pretrained(dir, save_compressed=True)`` after :func:`recipe_spec.oneshot`, as
llm-compressor's wrapped ``save_pretrained`` (``modify_save_pretrained``): the folder
``output_dir=`` would have written. A quantized model is compressed through compressed-tensors
(:func:`.compressed.save`: ``config.json`` ``quantization_config``, packed weights); a model
that is not quantized (pruned only) saves dense, as before; ``recipe.yaml`` (the recipe run)
and the tokenizer or processor given to (or loaded by) ``oneshot`` are written beside it.

``save_compressed=False`` writes a quantized model's weights as they are (the values the run
left, with their scales and zero points) in compressed-tensors' ``dense`` format, and
``quantization_format`` names the format instead of the one compressed-tensors infers, as
there; the keywords of transformers' own ``save_pretrained`` (``safe_serialization``,
``max_shard_size``: default ``"20GB"`` as there, ...) are passed on. A ``quantization_format``
for a model that is not quantized is a ValueError. Installed by the calibration host at the end of a successful run (:func:`install`).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
from recipe_spec.atomic import write_text

from .compressed import MARK, installed, original_save, quantized, save
from .shards import save_streamed
from .streaming import store_of

__all__ = ["install", "installed", "original_save"]


def install(model: torch.nn.Module, recipe_text: str, processor: Any = None) -> bool:
    """Replace ``model.save_pretrained`` (on this object only) by the wrapper described in the
    module docstring; False (nothing changed) for a model without ``save_pretrained``. A
    second run installs its own recipe and processor over the first's."""
    current = getattr(model, "save_pretrained", None)
    if not callable(current):
        return False
    original = original_save(model)
    ref = weakref.ref(model)

    def save_pretrained(save_directory: str | os.PathLike[str], *args: Any, save_compressed: bool = True,
                        quantization_format: str | None = None, **kwargs: Any) -> None:
        target = ref()
        if target is None:  # pragma: no cover - the bound method keeps the model alive
            raise RuntimeError("the model was freed")
        if args:
            raise TypeError("save_pretrained(save_directory, save_compressed=..., **kwargs): pass its other "
                            "arguments by keyword")
        folder = os.fspath(save_directory)
        kwargs.setdefault("max_shard_size", "20GB")  # as llm-compressor's wrapper
        if quantized(target):
            os.makedirs(folder, exist_ok=True)
            store = store_of(target)
            if store is not None:  # one block at a time
                save_streamed(target, store, folder, True, quantization_format, save_compressed,
                              kwargs["max_shard_size"])
            else:
                save(target, folder, save=lambda out: original(out, **kwargs),
                     quantization_format=quantization_format, compress=save_compressed)
        elif quantization_format is not None:
            raise ValueError(f"quantization_format={quantization_format!r}: this model is not quantized (nothing to "
                             "save in a quantization format); leave quantization_format out")
        else:
            os.makedirs(folder, exist_ok=True)
            original(folder, **kwargs)
        write_text(os.path.join(folder, "recipe.yaml"), recipe_text)
        _save_processor(processor, folder)

    save_pretrained.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(save_pretrained, MARK, True)
    save_pretrained.__doc__ = __doc__
    model.save_pretrained = save_pretrained  # type: ignore[method-assign]
    return True


def _save_processor(processor: Any, folder: str) -> None:
    if processor is None or isinstance(processor, (str, os.PathLike)):
        return
    save = getattr(processor, "save_pretrained", None)
    if callable(save):
        save(folder)
