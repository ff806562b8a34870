"""A Hugging Face checkpoint loaded for ``recipe_spec.oneshot(model="folder")``, as
llm-compressor 0.14's ``initialize_model_from_path`` / ``initialize_processor_from_path``
(``entrypoints/utils.py``): ``AutoConfig`` from ``config_name`` or the folder, then
``AutoModelForCausalLM.from_pretrained(folder, config=..., dtype=parse_dtype(precision))``
(``"auto"``: the checkpoint's own dtype), and ``AutoProcessor.from_pretrained`` for the
tokenizer. Nothing is downloaded (``local_files_only``): a hub id loads only when it is in the
local cache. A compressed-tensors checkpoint is decompressed, as there. A local folder of
safetensors shards is streamed block by block (:mod:`.streaming`), so the run holds one block's
weights at a time.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["load_model", "load_processor", "DTYPES"]

#: llm-compressor's ``parse_dtype`` names.
DTYPES = {"auto": "auto", "half": "float16", "float16": "float16", "torch.float16": "float16",
          "bfloat16": "bfloat16", "torch.bfloat16": "bfloat16", "full": "float32", "float32": "float32",
          "torch.float32": "float32"}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:240] if text else ''}"


def load_model(path: str, precision: str = "auto", config_name: str | None = None,
               trust_remote_code: bool = False, stream: bool = True) -> Any:
    """The causal-LM model of ``path`` (see the module docstring). ValueError, one line, when
    transformers cannot load it. ``stream``: a local folder of safetensors shards is built
    without its blocks' weights, which come one block at a time as the run needs them
    (:mod:`.streaming`); False, or a folder that cannot be streamed: loaded whole."""
    import transformers

    import torch

    name = DTYPES.get(str(precision))
    if name is None:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(DTYPES)}")
    dtype = "auto" if name == "auto" else getattr(torch, name)
    try:
        config = transformers.AutoConfig.from_pretrained(config_name or path, trust_remote_code=trust_remote_code,
                                                         local_files_only=True)
        kwargs: dict[str, Any] = {"config": config, "dtype": dtype, "trust_remote_code": trust_remote_code,
                                  "local_files_only": True}
        if stream and os.path.isdir(path):
            from .streaming import streamed_model

            streamed = streamed_model(path, config, dtype, trust_remote_code)
            if streamed is not None:
                from .shards import install_save

                install_save(streamed)
                return streamed
        if isinstance(getattr(config, "quantization_config", None), dict) and \
                config.quantization_config.get("quant_method") == "compressed-tensors":
            kwargs["quantization_config"] = transformers.utils.quantization_config.CompressedTensorsConfig(
                dequantize=True)
        return transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as exc:  # transformers raises many kinds; one line says which
        raise ValueError(f"transformers cannot load it ({_one_line(exc)})") from None


def load_processor(source: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """``AutoProcessor.from_pretrained(source)`` (a tokenizer for a text-only checkpoint);
    ValueError, one line, when it cannot be loaded."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(os.fspath(source), trust_remote_code=trust_remote_code,
                                                          local_files_only=True)
    except Exception as exc:
        raise ValueError(f"transformers cannot load a tokenizer or processor from it ({_one_line(exc)})") from None
