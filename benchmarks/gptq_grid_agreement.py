"""How often GPTQ on Keras (TensorFlow, JAX) puts a weight on the grid point PyTorch does, and
what starts a difference.

For each seed, a random two-layer Llama (the shape of the conformance cases: hidden 128,
intermediate 256) and 16 random calibration sequences of 32-95 tokens are compressed with
GPTQ W4A16 (``w4a16``) and with SparseGPT 2:4 then GPTQ W4A16 (``sparse_w4a16``, case 10's
recipe), once by recipe-spec on PyTorch (the reference: llm-compressor 0.14's arithmetic, bit
for bit) and once on a keras-hub Llama of the same checkpoint on each Keras backend. Printed per
run: the share of weights on PyTorch's grid point over all layers and on the worst layer, and
the first layer that differs. Then, for that layer, the cause: recipe-spec's NumPy solve (what
every Keras backend runs) given **PyTorch's own Hessian and weight**; when it already differs,
the solve's linear algebra (NumPy/OpenBLAS against PyTorch/MKL: Cholesky and inverse to about
1e-6) started it, not the framework's forward pass. The baseline is a second PyTorch run in the
same process tree (its agreement with the first: determinism). ``jax+flags`` runs JAX again
with :data:`XLA_ONEDNN_ORDER` in ``XLA_FLAGS``; for JAX runs, the count of layers whose weights
equal TensorFlow's bit for bit is printed too.

    python benchmarks/gptq_grid_agreement.py [--seeds 1 2 3 4 5 6] [--recipes w4a16 sparse_w4a16]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "tests" / "data" / "conformance" / "llmcompressor" / "10_staged_sparse24_gptq_w4a16" / "case.json"
GPTQ = "quant_stage:\n  quant_modifiers:\n    GPTQModifier: {scheme: W4A16, targets: [Linear], ignore: [lm_head]}\n"


def _recipes() -> dict[str, str]:
    return {"w4a16": GPTQ, "sparse_w4a16": json.loads(CASE.read_text())["recipe_yaml"]}


def make(folder: Path, seed: int) -> None:
    """A random Llama checkpoint of case 10's shape and 16 calibration sequences, in ``folder``."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = json.loads(CASE.read_text())["model_config"]
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).float()
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(dict(config, architectures=["LlamaForCausalLM"])))
    rng = np.random.default_rng(seed)
    ids = [rng.integers(4, 128, int(rng.integers(32, 96))).tolist() for _ in range(16)]
    (folder / "ids.json").write_text(json.dumps(ids))


def _samples(folder: Path) -> list[dict[str, list[int]]]:
    return [{"input_ids": t, "attention_mask": [1] * len(t)} for t in json.loads((folder / "ids.json").read_text())]


def run(framework: str, folder: Path, recipe: str, out: Path) -> None:
    """One run; writes each quantized layer's dequantized weight (and on PyTorch its scale and
    the GPTQ solve's inputs) to ``out``."""
    import recipe_spec

    if framework == "torch":
        import torch
        import transformers
        from safetensors.torch import load_file

        from recipe_spec.oneshot import gptq as quantize

        torch.set_num_threads(1)
        solves: list[dict[str, Any]] = []
        original = quantize.gptq_quantize

        def recording(ops: Any, weight: Any, hessian: Any, **kwargs: Any) -> Any:
            solves.append({"weight": weight.numpy().copy(), "hessian": hessian.numpy().copy(), "kwargs": kwargs})
            result = original(ops, weight, hessian, **kwargs)
            solves[-1]["out"] = result.weight.numpy().copy()
            return result

        quantize.gptq_quantize = recording
        config = json.loads((folder / "config.json").read_text())
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).float().eval()
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(folder), num_calibration_samples=16,
                            shuffle_calibration_samples=False, progress=False)
        arrays = {}
        for name, module in model.named_modules():
            if hasattr(module, "weight_scale"):
                arrays[name + ".w"] = module.weight.detach().numpy()
                arrays[name + ".s"] = module.weight_scale.detach().numpy()
        np.savez(out, **arrays)
        out.with_suffix(".pkl").write_bytes(pickle.dumps(solves))
        return
    import keras_hub
    from recipe_spec_keras.oneshot import KerasCalibrationHost
    from recipe_spec_keras.quantized import keras_weight

    model = keras_hub.models.LlamaCausalLM.from_preset(str(folder), preprocessor=None)
    layers = {n: lin.layer for n, lin in KerasCalibrationHost(model)._linear.items() if not lin.reverse}
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(folder), num_calibration_samples=16,
                        shuffle_calibration_samples=False, batch_size=1, progress=False)
    np.savez(out, **{n + ".w": np.asarray(keras_weight(layer)) for n, layer in layers.items() if n != "lm_head"})


def _grid(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    if scale.shape[1] != weight.shape[1]:
        scale = np.repeat(scale, weight.shape[1] // scale.shape[1], axis=1)
    return np.round(weight / scale)


def agreement(reference: Path, other: Path) -> dict[str, float]:
    """Per layer, the share of ``other``'s weights on the reference's grid point (in layer order)."""
    ref, got = np.load(reference), np.load(other)
    names = [k[:-2] for k in ref.files if k.endswith(".w")]
    return {n: float((_grid(got[n + ".w"], ref[n + ".s"]) == _grid(ref[n + ".w"], ref[n + ".s"])).mean())
            for n in names}


def numpy_solve_on_torch_hessian(reference: Path, layer_index: int) -> float:
    """The share of the layer's weights on PyTorch's grid point when recipe-spec's NumPy solve
    is given PyTorch's own weight and Hessian for it."""
    from recipe_spec.masks.numpy_ops import NUMPY_OPS
    from recipe_spec.oneshot.gptq.solve import gptq_quantize

    solve = pickle.loads(reference.with_suffix(".pkl").read_bytes())[layer_index]
    ref = np.load(reference)
    name = [k[:-2] for k in ref.files if k.endswith(".w")][layer_index]
    result = gptq_quantize(NUMPY_OPS, solve["weight"], solve["hessian"], **solve["kwargs"])
    scale = ref[name + ".s"]
    return float((_grid(np.asarray(result.weight), scale) == _grid(solve["out"], scale)).mean())


#: XLA settings under which JAX's CPU products sum as oneDNN's do for reductions up to 256 long
XLA_ONEDNN_ORDER = ("--xla_cpu_use_xnnpack=false --xla_cpu_experimental_ynn_fusion_type= "
                    "--xla_cpu_experimental_xnn_fusion_type=")


def _child(framework: str, folder: Path, recipe: str, out: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if framework == "jax+flags":
        framework = "jax"
        env["XLA_FLAGS"] = XLA_ONEDNN_ORDER
    if framework != "torch":
        env.update(KERAS_BACKEND=framework, JAX_PLATFORMS="cpu")
    here = str(Path(__file__).parent)
    code = (f"import sys; sys.path.insert(0, {here!r}); import gptq_grid_agreement as g; from pathlib import Path; "
            f"g.run({framework!r}, Path({str(folder)!r}), sys.stdin.read(), Path({str(out)!r}))")
    subprocess.run([sys.executable, "-c", code], input=recipe, text=True, check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    p.add_argument("--recipes", nargs="+", default=["w4a16", "sparse_w4a16"], choices=sorted(_recipes()))
    p.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "jax+flags"],
                   help="jax+flags: JAX with XLA_ONEDNN_ORDER in XLA_FLAGS")
    args = p.parse_args(argv)
    print(f"{'seed':>4} {'recipe':<13} {'backend':<11} {'all layers':>10} {'worst':>9}  first layer off "
          "(NumPy solve on PyTorch's Hessian there)")
    below = {b: 0 for b in ["torch", *args.backends]}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            folder = Path(tmp) / f"seed{seed}"
            make(folder, seed)
            for name in args.recipes:
                recipe = _recipes()[name]
                reference = folder / f"torch_{name}.npz"
                _child("torch", folder, recipe, reference)
                for backend in ["torch", *args.backends]:
                    out = folder / f"{backend}_{name}_2.npz" if backend == "torch" else folder / f"{backend}_{name}.npz"
                    _child(backend, folder, recipe, out)
                    per_layer = agreement(reference, out)
                    values = list(per_layer.values())
                    total = float(np.mean(values))
                    worst = min(per_layer, key=per_layer.__getitem__)
                    below[backend] += per_layer[worst] < 0.98
                    first = next((i for i, v in enumerate(values) if v < 1.0), None)
                    cause = "-" if first is None else (
                        f"{list(per_layer)[first]} "
                        f"({numpy_solve_on_torch_hessian(reference, first):.2%} on PyTorch's grid)")
                    same = ""
                    if backend.startswith("jax") and "tensorflow" in args.backends:
                        tf, got = np.load(folder / f"tensorflow_{name}.npz"), np.load(out)
                        same = f"  [{sum(np.array_equal(tf[k], got[k]) for k in tf.files)}/{len(tf.files)} layers = TF]"
                    print(f"{seed:>4} {name:<13} {backend:<11} {total:>10.4%} {per_layer[worst]:>9.4%}  {cause}{same}",
                          flush=True)
    runs = len(args.seeds) * len(args.recipes)
    for backend, count in below.items():
        print(f"{backend}: {count} of {runs} runs have a layer below 98% on PyTorch's grid "
              f"(baseline, a second PyTorch run: {below['torch']} of {runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
