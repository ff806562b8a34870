"""The PyTorch side of the one-shot fuzz campaign (``benchmarks/fuzz_oneshot.py``): the tiny
random Llama of a case, its fingerprint (every parameter and buffer bit for bit, the module
types, hooks, training flags, config, one forward), its calibration data and the check of a
saved folder."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import torch

_MODELS: dict[str, Any] = {}
_PROBE = torch.tensor([[1, 2, 3, 4, 5, 6]])


def _config(spec: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    heads = spec["heads"] if spec["hidden"] % spec["heads"] == 0 and (spec["hidden"] // spec["heads"]) % 2 == 0 else 2
    return LlamaConfig(vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["intermediate"],
                       num_hidden_layers=spec["layers"], num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=spec["positions"], tie_word_embeddings=False)


def build(spec: dict[str, Any]) -> Any:
    """A fresh copy of the case's model (built once per configuration, seeded)."""
    from transformers import LlamaForCausalLM

    key = json.dumps({k: v for k, v in spec.items() if k != "variant"}, sort_keys=True)
    if spec["variant"] == "meta":
        with torch.device("meta"):
            return LlamaForCausalLM(_config(spec))
    if key not in _MODELS:
        torch.manual_seed(0)
        _MODELS[key] = LlamaForCausalLM(_config(spec)).eval()
    model = copy.deepcopy(_MODELS[key])
    if spec["variant"] in ("nan-weight", "inf-weight"):
        w = model.model.layers[-1].mlp.down_proj.weight
        with torch.no_grad():
            w[0, 1] = float("nan") if spec["variant"] == "nan-weight" else float("inf")
    elif spec["variant"] == "tied-head":
        model.lm_head.weight = model.model.embed_tokens.weight
        model.config.tie_word_embeddings = True
        model._fuzz_embedding = model.model.embed_tokens.weight.detach().clone()
    elif spec["variant"] == "training":
        model.train()
    elif spec["variant"] == "quantized-before":
        import recipe_spec

        recipe_spec.oneshot(model=model, recipe="quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n"
                            "      scheme: W8A8\n      targets: [Linear]\n      ignore: [lm_head]\n")
    return model


def forward(model: Any) -> Any:
    """The logits of a fixed probe (None where the model cannot run: a meta-device model)."""
    if any(p.is_meta for p in model.parameters()):
        return None
    with torch.no_grad():
        return model(input_ids=_PROBE).logits.detach().clone()


def fingerprint(model: Any) -> dict[str, Any]:
    """Everything a refused run must leave as it was."""
    state = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False)):
        raw = None if t.is_meta else t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
        state[name] = (str(t.dtype), t.device.type, tuple(t.shape), bool(t.requires_grad), hash(raw))
    modules = {n: (type(m).__qualname__, m.training, len(m._forward_hooks), len(m._forward_pre_hooks),
                   len(m._backward_hooks), len(getattr(m, "_state_dict_hooks", {})),
                   tuple(sorted(k for k in vars(m) if not k.startswith("_") and k != "training")))
               for n, m in model.named_modules()}
    from torch.nn.modules import module as mm

    hooks = (len(mm._global_forward_hooks), len(mm._global_forward_pre_hooks), len(mm._global_backward_hooks))
    config = getattr(model, "config", None)
    out = forward(model)
    return {"state": state, "modules": modules, "hooks": hooks,
            "config": config.to_json_string() if config is not None else None,
            "forward": None if out is None else hash(out.numpy().tobytes())}


def finite_forward(model: Any) -> bool:
    out = forward(model)
    return out is None or bool(torch.isfinite(out).all())


def dataset(case: dict[str, Any]) -> Any:
    """The calibration object of the case (a list of dicts, a DataLoader, tensors, ...)."""
    kind, samples = case["data"]["kind"], case["data"]["samples"]
    if kind == "list":
        return samples
    if kind == "tensors":
        return [{k: torch.tensor(v) for k, v in s.items()} for s in samples]
    if kind == "dataloader":
        rows = [{k: torch.tensor(v[:4]) for k, v in s.items()} for s in samples]
        return torch.utils.data.DataLoader(rows, batch_size=2)
    if kind == "tuple-loader":
        rows = [(torch.tensor(s["input_ids"][:4]), torch.tensor(s["attention_mask"][:4])) for s in samples]
        return torch.utils.data.DataLoader(rows, batch_size=2)
    return common_dataset(kind, samples)


class Table:
    """A tokenised ``datasets.Dataset`` as ``recipe_spec`` reads one (``column_names``, rows by
    index)."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows, self.column_names = rows, list(rows[0])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]


def common_dataset(kind: str, samples: list[dict[str, Any]]) -> Any:
    """The wrong containers, the same on every backend."""
    if kind == "one-dict":
        return samples[0]
    if kind == "list-of-lists":  # token-id sequences without a dict: read as input_ids
        return [s["input_ids"] if "input_ids" in s else s["token_ids"] for s in samples]
    if kind == "strings":
        return ["hello world"] * len(samples)
    if kind == "no-samples":
        return []
    if kind == "none":
        return None
    if kind == "generator":
        return (dict(s) for s in samples)
    if kind == "endless":  # a source that never ends: the run reads what it needs
        import itertools

        return itertools.chain((dict(s) for s in samples), (dict(samples[0]) for _ in itertools.count()))
    if kind == "dataset":
        return Table(samples)
    raise ValueError(f"no data kind {kind!r}")


def check_saved(folder: str, finite: bool) -> str | None:
    """None when ``folder`` holds a complete, loadable checkpoint; else what is wrong."""
    names = set(os.listdir(folder))
    for need in ("config.json", "recipe.yaml"):
        if need not in names:
            return f"no {need} in {sorted(names)}"
    shards = {n for n in names if n.endswith(".safetensors")}
    if "model.safetensors.index.json" in names:
        index = json.loads(open(os.path.join(folder, "model.safetensors.index.json")).read())
        wanted = set(index["weight_map"].values())
        if wanted != shards:
            return f"the index names {sorted(wanted)}, the folder holds {sorted(shards)}"
    elif shards != {"model.safetensors"}:
        return f"weights files {sorted(shards)}"
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001 - the finding is the message
        return f"does not load: {type(exc).__name__}: {str(exc)[:200]}"
    if finite and not finite_forward(model):
        return "the loaded model computes non-finite logits"
    return None


def save_checkpoint(spec: dict[str, Any], folder: str) -> None:
    """The case's model as a Hugging Face checkpoint folder (for the command line)."""
    model = build(dict(spec, variant="plain"))
    if spec["variant"] in ("nan-weight", "inf-weight"):
        model = build(spec)
    model.save_pretrained(folder)


_CHECKPOINTS: dict[str, Any] = {}


def checkpoint(spec: dict[str, Any], work: Any) -> Any:
    """The case's model saved once as a checkpoint folder under ``work`` (the command line's)."""
    key = json.dumps(spec, sort_keys=True)
    if key not in _CHECKPOINTS:
        folder = work / f"checkpoint-{len(_CHECKPOINTS)}"
        save_checkpoint(spec, str(folder))
        _CHECKPOINTS[key] = folder
    return _CHECKPOINTS[key]


def drop(model: Any) -> None:
    """Nothing to forget: every case gets its own copy."""


def poke(model: Any) -> None:
    """Change one weight (the fake surfaces of the harness's tests)."""
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1.0


def warm() -> None:
    """Import what the cases use (so that no case's time limit pays for it)."""
    import recipe_spec_torch.oneshot  # noqa: F401
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401

    import recipe_spec.cli  # noqa: F401
    from recipe_spec.oneshot import api  # noqa: F401


def tied_kept(model: Any) -> bool:
    """A model built tied (``tied-head``) kept its embedding's values, whatever the head became."""
    kept = getattr(model, "_fuzz_embedding", None)
    return kept is None or torch.equal(model.model.embed_tokens.weight.detach(), kept)
