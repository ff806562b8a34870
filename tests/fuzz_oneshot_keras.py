"""The Keras side of the one-shot fuzz campaign (``benchmarks/fuzz_oneshot.py``): a tiny random
keras-hub ``LlamaCausalLM`` (built from a ``LlamaBackbone`` config in memory, or loaded from a
Hugging Face checkpoint folder as ``load_causal_lm`` loads one), its fingerprint (every variable
bit for bit, the layer types and quantization modes, one forward), its calibration data (the
Hugging Face names or keras-hub's ``token_ids``/``padding_mask``) and the check of a saved
folder. Models are built once per configuration and their weights put back before each case."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

_MODELS: dict[str, tuple[Any, list[np.ndarray]]] = {}
_PROBE = np.asarray([[1, 2, 3, 4, 5, 6]], "int32")


def _new(spec: dict[str, Any], origin: str) -> Any:
    import keras
    import keras_hub

    heads = spec["heads"] if (spec["hidden"] // spec["heads"]) % 2 == 0 and spec["hidden"] % spec["heads"] == 0 else 2
    if origin == "checkpoint":
        from fuzz_oneshot_torch import save_checkpoint
        from recipe_spec_keras.hub import load_causal_lm

        folder = tempfile.mkdtemp(prefix="fuzz-keras-ckpt-")
        save_checkpoint(dict(spec, heads=heads, variant="plain"), folder)
        return load_causal_lm(folder)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=spec["vocab"], num_layers=spec["layers"], num_query_heads=heads,
        hidden_dim=spec["hidden"], intermediate_dim=spec["intermediate"], num_key_value_heads=heads)
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)


def build(spec: dict[str, Any]) -> Any:
    """The case's model with its initial weights (a cached model whose weights are put back)."""
    origin = spec.get("origin", "memory")
    key = json.dumps({k: v for k, v in spec.items() if k != "variant"}, sort_keys=True)
    if key in _MODELS and [tuple(v.shape) for v in _MODELS[key][0].weights] != [w.shape for w in _MODELS[key][1]]:
        del _MODELS[key]  # a run changed its layers (quantized): build it again
    if key not in _MODELS:
        model = _new(spec, origin)
        _MODELS[key] = (model, [np.array(v) for v in model.weights])
    model, initial = _MODELS[key]
    for v, w in zip(model.weights, initial, strict=True):
        v.assign(w)
    if spec["variant"] in ("nan-weight", "inf-weight"):
        layer = model.backbone.transformer_layers[-1]._feedforward_output_dense
        w = np.array(layer.kernel)
        w[1, 0] = np.nan if spec["variant"] == "nan-weight" else np.inf
        layer.kernel.assign(w)
    elif spec["variant"] == "quantized-before":
        import recipe_spec

        drop(model)
        recipe_spec.oneshot(model=model, recipe="quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n"
                            "      scheme: W8A8\n      targets: [Linear]\n      ignore: [lm_head, 're:.*reverse_embeddings$']\n")
    return model


def drop(model: Any) -> None:
    """Forget a cached model a run changed (the next case builds it again)."""
    for key, (cached, _) in list(_MODELS.items()):
        if cached is model:
            del _MODELS[key]


def forward(model: Any) -> np.ndarray:
    out = model({"token_ids": _PROBE, "padding_mask": np.ones_like(_PROBE)}, training=False)
    return np.asarray(out)


def fingerprint(model: Any) -> dict[str, Any]:
    """Everything a refused run must leave as it was."""
    state = {v.path: (str(v.dtype), tuple(v.shape), bool(v.trainable), hash(np.asarray(v).tobytes()))
             for v in model.weights}
    layers = [(getattr(layer, "path", layer.name), type(layer).__qualname__, str(layer.dtype_policy.name),
               getattr(layer, "quantization_mode", None), bool(layer.trainable),
               tuple(sorted(k for k in vars(layer) if not k.startswith("_"))))
              for layer in model._flatten_layers()]
    return {"state": state, "layers": layers, "forward": hash(forward(model).tobytes())}


def finite_forward(model: Any) -> bool:
    return bool(np.isfinite(forward(model)).all())


class _Loader:
    """A DataLoader as ``recipe_spec`` tells one (``batch_size``, ``dataset``, ``sampler``)."""

    def __init__(self, rows: list[Any], batch_size: int, tuples: bool):
        self.dataset, self.batch_size, self.sampler, self.tuples = rows, batch_size, None, tuples

    def __iter__(self) -> Any:
        for i in range(0, len(self.dataset), self.batch_size):
            part = self.dataset[i:i + self.batch_size]
            ids = np.stack([np.asarray(r["input_ids"][:4]) for r in part])
            mask = np.stack([np.asarray(r["attention_mask"][:4]) for r in part])
            yield (ids, mask) if self.tuples else {"input_ids": ids, "attention_mask": mask}


def dataset(case: dict[str, Any]) -> Any:
    from fuzz_oneshot_torch import common_dataset

    kind, samples = case["data"]["kind"], case["data"]["samples"]
    if case["data"].get("keras_names"):
        samples = [{{"input_ids": "token_ids", "attention_mask": "padding_mask"}.get(k, k): v for k, v in s.items()}
                   for s in samples]
    if kind == "list":
        return samples
    if kind == "tensors":
        return [{k: np.asarray(v) for k, v in s.items()} for s in samples]
    if kind in ("dataloader", "tuple-loader"):
        return _Loader(case["data"]["samples"], 2, kind == "tuple-loader")
    return common_dataset(kind, samples)


def check_saved(folder: str, finite: bool) -> str | None:
    """None when ``folder`` holds a complete, loadable Keras model; else what is wrong."""
    import keras

    names = set(os.listdir(folder))
    if "recipe.yaml" not in names:
        return f"no recipe.yaml in {sorted(names)}"
    try:
        if "model.keras" in names:
            loaded = keras.saving.load_model(os.path.join(folder, "model.keras"))
        else:
            import keras_hub

            loaded = keras_hub.models.LlamaCausalLM.from_preset(folder, preprocessor=None)
    except Exception as exc:  # noqa: BLE001 - the finding is the message
        return f"does not load: {type(exc).__name__}: {str(exc)[:200]}"
    if finite and not finite_forward(loaded):
        return "the loaded model computes non-finite logits"
    return None


def poke(model: Any) -> None:
    """Change one weight (the fake surfaces of the harness's tests)."""
    v = model.weights[0]
    w = np.array(v)
    w.reshape(-1)[0] += 1.0
    v.assign(w)


def checkpoint(spec: dict[str, Any], work: Any) -> Any:
    raise NotImplementedError("the command line loads Hugging Face checkpoints into PyTorch only")


def warm() -> None:
    """Import what the cases use (so that no case's time limit pays for it)."""
    import keras_hub.models  # noqa: F401
    import recipe_spec_keras.oneshot  # noqa: F401

    from recipe_spec.oneshot import api  # noqa: F401
