"""What a Hugging Face ``config.json`` says about a model's layout, without building it:
the class of its repeated decoder layer, its hidden size and layer count.

The decoder-layer class is the architecture's name (``architectures[0]``) without its head
suffix, plus ``DecoderLayer``: ``LlamaForCausalLM`` -> ``LlamaDecoderLayer``,
``Qwen2ForCausalLM`` -> ``Qwen2DecoderLayer``. The models whose block is named otherwise are
listed in :data:`BLOCK_CLASSES` by ``model_type`` (as ``transformers`` names them).

>>> decoder_layer_class({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
'LlamaDecoderLayer'
>>> decoder_layer_class({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
'GPT2Block'
>>> hidden_size({"n_embd": 768}), hidden_size({})
(768, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BLOCK_CLASSES", "decoder_layer_class", "architecture", "hidden_size", "layer_count"]

#: The repeated block of the models whose block is not ``<Name>DecoderLayer``, by
#: ``model_type`` (``transformers`` class names).
BLOCK_CLASSES: dict[str, str] = {
    "gpt2": "GPT2Block",
    "gptj": "GPTJBlock",
    "gpt_neo": "GPTNeoBlock",
    "gpt_neox": "GPTNeoXLayer",
    "gpt_bigcode": "GPTBigCodeBlock",
    "bloom": "BloomBlock",
    "mpt": "MptBlock",
    "codegen": "CodeGenBlock",
}

#: Head suffixes of architecture names, longest first.
_HEADS = ("ForConditionalGeneration", "ForSequenceClassification", "ForTokenClassification",
          "ForQuestionAnswering", "ForCausalLM", "LMHeadModel", "Model")


def architecture(config: Mapping[str, Any]) -> str | None:
    """The first architecture named in the config (``LlamaForCausalLM``), or None."""
    arch = config.get("architectures")
    if isinstance(arch, list):
        for a in arch:
            if isinstance(a, str) and a:
                return a
    return None


def decoder_layer_class(config: Mapping[str, Any]) -> str | None:
    """The class name of the model's repeated decoder layer (see the module docstring), or None
    when the config names no architecture and no model type in :data:`BLOCK_CLASSES`."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in BLOCK_CLASSES:
        return BLOCK_CLASSES[model_type]
    arch = architecture(config)
    if arch is None:
        return None
    for suffix in _HEADS:
        if arch.endswith(suffix) and len(arch) > len(suffix):
            return arch[: -len(suffix)] + "DecoderLayer"
    return None


def _first_int(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for source in (config, config.get("text_config")):
        if not isinstance(source, Mapping):
            continue
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def hidden_size(config: Mapping[str, Any]) -> int | None:
    """The width of the hidden states (``hidden_size``, ``n_embd`` or ``d_model``)."""
    return _first_int(config, ("hidden_size", "n_embd", "d_model"))


def layer_count(config: Mapping[str, Any]) -> int | None:
    """The number of decoder layers (``num_hidden_layers``, ``n_layer`` or ``num_layers``)."""
    return _first_int(config, ("num_hidden_layers", "n_layer", "num_layers"))
