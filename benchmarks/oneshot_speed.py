"""One-shot pruning and quantization speed and memory against llm-compressor 0.14, measured in
the same run.

The model and data of ``shared/conformance/llmcompressor/speed/`` (its README): a randomly
initialised Llama (vocab 1024, hidden 512, intermediate 1536, 4 layers, 8 heads, untied;
14.7M parameters, seed 0) and 64 calibration samples of 256 random tokens (seed 1), batch 1, no
shuffling. The settings, every Linear but ``lm_head``: ``sparsegpt50``, ``wanda50`` and
``gptq_w4a16`` (GPTQModifier scheme W4A16: int4 groups of 128, static activation order), the
recipes of ``llmcompressor_speed.py``, and ``rtn_w8a8`` (QuantizationModifier scheme W8A8:
round to nearest, int8 per channel, dynamic per-token activations; the quality anchor's
setting of that name), which needs no calibration pass on either side. Each run is a fresh
process that builds the model, calls ``oneshot`` once and reports:

- the wall time of ``oneshot`` (the modules each side imports are imported before the clock
  starts: llm-compressor's with ``from llmcompressor import oneshot``, ours with
  ``recipe_spec.oneshot``, the torch host and compressed-tensors' quantization);
- the time per decoder layer: from the first call of the first decoder layer to the end of
  ``oneshot``, divided by the number of layers (each layer is calibrated, compressed and run
  again for the next layer's inputs); the time before it (``setup``: reading the recipe and
  the data, capturing the first layer's inputs) is shown apart. Where no decoder layer runs
  (``rtn_w8a8``) it is 0, all of the time is setup, and the table gives no ratio for it;
- the process's peak resident memory after ``oneshot``;
- the CPU time of ``oneshot`` (user and system, both threads): on a shared machine whose
  cores are at times taken by others (a virtual machine's stolen time), it moves less than
  the wall time, and its ratio is the steadier one;
- the share of exact zeros in the decoder's Linear weights (``sparsity``: pruned weights, or
  for GPTQ the weights it put on the grid's 0; round to nearest leaves the weights as they
  are, as llm-compressor does).

Ours (``recipe_spec.oneshot``) and llm-compressor's (``llmcompressor.oneshot``) runs are
interleaved (ours, theirs, ours, theirs, ...) so that both see the same load on a shared
machine; the table gives the min and median of ``--runs`` runs each, the ratio ours/theirs
of the medians and that of the minima (``min/min``: the quietest run of each; where the load
of a shared machine changes between two runs, it falls on one side only, and the medians of
three runs can carry it). llm-compressor runs under ``--llmcompressor-python`` (a Python with
``llmcompressor==0.14.0.1``; default: ``$LLMCOMPRESSOR_PYTHON``, else ``/work/lcvenv/bin/python``
when it exists). ``--ours-python`` picks the interpreter of our runs (default: this one); give
both the same interpreter to compare with the same torch and transformers. When
llm-compressor cannot be run, the README's recorded times (another run, another moment) are
shown instead, and the output says so.

    python benchmarks/oneshot_speed.py [--recipes sparsegpt50,wanda50,gptq_w4a16,rtn_w8a8] [--runs 3]
        [--threads 2]
        [--samples 64] [--llmcompressor-python PATH | --without-llmcompressor]
        [--ours-python PATH] [--profile FILE]

``--profile FILE`` runs ours once under cProfile (the first recipe) and writes the stats there.

After the runs, the estimate ``recipe-spec oneshot`` prints for the same model, recipe and data
(``recipe_spec.oneshot.estimate``, the model saved as a checkpoint folder, this machine's
rates measured with PyTorch's arrays and the same threads) is shown beside our median time,
with their ratio (the estimate is meant to land within 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RECIPES = {
    "sparsegpt50": "sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
                   "      targets: [\"Linear\"]\n      ignore: [\"re:.*lm_head\"]\n",
    "wanda50": "sparsity_stage:\n  sparsity_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n"
               "      targets: [\"Linear\"]\n      ignore: [\"re:.*lm_head\"]\n",
    "gptq_w4a16": "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                  "      targets: [\"Linear\"]\n      ignore: [\"lm_head\"]\n",
    "rtn_w8a8": "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: W8A8\n"
                "      targets: [\"Linear\"]\n      ignore: [\"lm_head\"]\n",
}
#: The README's figures (llm-compressor 0.14.0.1, 2 threads, one run each, another moment).
RECORDED = {"sparsegpt50": (52.5, 666.0), "wanda50": (28.6, 653.0), "gptq_w4a16": (52.9, 667.0)}
LAYERS = 4


def build(samples: int) -> tuple[Any, list[list[int]]]:
    """The README's model (seed 0) and calibration token ids (seed 1)."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1536,
                                   num_hidden_layers=LAYERS, num_attention_heads=8, num_key_value_heads=8,
                                   max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(4, cfg.vocab_size, (256,), generator=g).tolist() for _ in range(samples)]
    return model, ids


def _first_calls(model: Any) -> list[float]:
    """Hooks that record when each decoder layer is first called (``perf_counter``)."""
    import time as _time

    stamps: list[float] = [0.0] * len(model.model.layers)

    def hook_for(k: int) -> Any:
        def hook(*_: Any) -> None:
            if not stamps[k]:
                stamps[k] = _time.perf_counter()
        return hook

    for k, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(hook_for(k))
    return stamps


def run_once(impl: str, recipe: str, samples: int, profile: str | None = None) -> dict[str, Any]:
    """One ``oneshot`` call of ``impl`` ("ours" or "llmcompressor") in this process."""
    model, ids = build(samples)
    stamps = _first_calls(model)
    text = RECIPES[recipe]
    if impl == "ours":
        import importlib.util

        import recipe_spec_torch.oneshot  # noqa: F401

        import recipe_spec
        from recipe_spec.oneshot import algorithms, pipeline  # noqa: F401  imports before the clock, as llm-compressor's

        if importlib.util.find_spec("compressed_tensors"):  # what quantizing on torch imports
            import compressed_tensors.quantization  # noqa: F401

        data: Any = [{"input_ids": s, "attention_mask": [1] * len(s)} for s in ids]

        def call() -> None:
            recipe_spec.oneshot(model=model, recipe=text, dataset=data, num_calibration_samples=samples,
                                shuffle_calibration_samples=False, batch_size=1)
    elif impl.startswith("keras-"):
        import numpy as np
        from recipe_spec_keras.hub import load_causal_lm

        import recipe_spec
        from recipe_spec.oneshot import algorithms, pipeline  # noqa: F401, F811

        folder = tempfile.mkdtemp()
        model.save_pretrained(folder)
        model = load_causal_lm(folder)  # the keras-hub twin, fed keras-hub's own inputs
        data = [{"token_ids": np.asarray(s, "int32"), "padding_mask": np.ones(len(s), bool)} for s in ids]

        def call() -> None:
            recipe_spec.oneshot(model=model, recipe=text, dataset=data, num_calibration_samples=samples,
                                shuffle_calibration_samples=False, batch_size=1)
    else:
        import datasets
        import transformers
        from llmcompressor import oneshot
        from tokenizers import Tokenizer, models

        folder = tempfile.mkdtemp()
        model.config.save_pretrained(folder)
        model.config._name_or_path = folder  # llm-compressor reloads the config from here
        vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
        tok = transformers.PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")), unk_token="t0",
            pad_token="t1", eos_token="t2", bos_token="t3")
        data = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(s) for s in ids]})

        def call() -> None:
            oneshot(model=model, recipe=text, dataset=data, tokenizer=tok, num_calibration_samples=samples,
                    shuffle_calibration_samples=False, batch_size=1)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if profile:
        import cProfile

        cProfile.runctx("call()", globals(), {"call": call}, profile)
    else:
        call()
    end = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
    first = stamps[0] or end
    import torch

    if impl.startswith("keras-"):  # no decoder-layer clock: setup and per layer are not split
        sparsity, first, per_layer = _keras_sparsity(model), start, None
    else:
        sparsity = [float((layer.weight == 0).float().mean()) for name, layer in model.named_modules()
                    if isinstance(layer, torch.nn.Linear) and name.startswith("model.layers.")]
        per_layer = (end - first) / len(stamps)
    return {"impl": impl, "recipe": recipe, "oneshot_s": end - start, "cpu_s": cpu,
            "setup_s": None if per_layer is None else first - start, "per_layer_s": per_layer,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "sparsity": sum(sparsity) / max(len(sparsity), 1), "threads": torch.get_num_threads()}


def _keras_sparsity(model: Any) -> list[float]:
    """The share of zeros of each decoder Linear weight of a keras-hub model (a quantized layer:
    of the weight it computes with)."""
    import keras
    import numpy as np
    from recipe_spec_keras.quantized import keras_weight

    out = []
    for block in model.backbone.transformer_layers:
        for layer in block._flatten_layers(include_self=False, recursive=True):
            if not isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
                continue
            w = keras_weight(layer) if layer.quantization_mode else keras.ops.convert_to_numpy(layer.kernel)
            out.append(float(np.mean(np.asarray(w) == 0)))
    return out


def spawn(python: str, impl: str, recipe: str, threads: int, samples: int) -> dict[str, Any]:
    """:func:`run_once` in a fresh process of ``python`` (``keras-<backend>``: with
    ``KERAS_BACKEND`` set, XLA's and TensorFlow's thread pools at ``threads``)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), str(REPO / ".shim"), os.environ.get("PYTHONPATH")])))
    if impl.startswith("keras-"):
        env["KERAS_BACKEND"] = impl.removeprefix("keras-")
        env["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
        env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"] = str(threads), "1"
    cmd = [python, __file__, "--one", impl, "--recipes", recipe, "--threads", str(threads), "--samples", str(samples)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{impl} {recipe} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _keras_default() -> str:
    """``jax,tensorflow`` where keras-hub and both frameworks are installed here, else ``""``."""
    import importlib.util

    have = all(importlib.util.find_spec(m) for m in ("keras_hub", "jax", "tensorflow"))
    return "jax,tensorflow" if have else ""


def _llmcompressor_python(given: str | None) -> str | None:
    """The interpreter that runs llm-compressor, or None when there is none."""
    for cand in (given, os.environ.get("LLMCOMPRESSOR_PYTHON"), "/work/lcvenv/bin/python"):
        if not cand or not Path(cand).exists():
            continue
        ok = subprocess.run([cand, "-c", "import llmcompressor"], capture_output=True)
        if ok.returncode == 0:
            return cand
    return None


def _cell(values: list[float | None], fmt: str) -> str:
    if any(v is None for v in values):
        return "-"
    if fmt == "s":  # seconds: two decimals under 10 s (round to nearest takes a fraction of one)
        return "/".join(f"{v:.2f}" if v < 10 else f"{v:.1f}" for v in (min(values), statistics.median(values)))
    return f"{fmt.format(min(values))}/{fmt.format(statistics.median(values))}"


def table(runs: dict[tuple[str, str], list[dict[str, Any]]], recipes: list[str], measured: bool,
          keras: Sequence[str] = ()) -> list[str]:
    """The printed table: per recipe, ours and theirs (min/median), and the ratio of medians;
    each Keras backend's runs and their ratios to ours on PyTorch (``keras/ours``)."""
    lines = [f"{'recipe':12} {'impl':14} {'oneshot s':>13} {'per layer s':>13} {'setup s':>11} "
             f"{'peak RSS MiB':>13} {'CPU s':>11} {'sparsity':>8}"]
    for recipe in recipes:
        ours = runs[("ours", recipe)]
        rows = [("ours", ours)]
        if measured:
            rows.append(("llm-compressor", runs[("llmcompressor", recipe)]))
        for label, rs in rows:
            lines.append(f"{recipe:12} {label:14} {_cell([r['oneshot_s'] for r in rs], 's'):>13} "
                         f"{_cell([r['per_layer_s'] for r in rs], '{:.2f}'):>13} "
                         f"{_cell([r['setup_s'] for r in rs], 's'):>11} "
                         f"{_cell([r['peak_rss_mib'] for r in rs], '{:.0f}'):>13} "
                         f"{_cell([r['cpu_s'] for r in rs], 's'):>11} {rs[0]['sparsity']:8.4f}")
        if measured:
            theirs = runs[("llmcompressor", recipe)]

            for label, pick in (("ours/theirs", statistics.median), ("min/min", min)):
                def ratio(key: str, a: list[dict[str, Any]] = ours, b: list[dict[str, Any]] = theirs,
                          pick: Any = pick) -> str:
                    den = pick(r[key] for r in b)  # 0 per layer: no layer ran (data-free)
                    return f"{pick(r[key] for r in a) / den:.2f}" if den else "-"

                lines.append(f"{recipe:12} {label:14} {ratio('oneshot_s'):>13} {ratio('per_layer_s'):>13} "
                             f"{ratio('setup_s'):>11} {ratio('peak_rss_mib'):>13} {ratio('cpu_s'):>11}")
        for backend in keras:
            ks = runs[(f"keras-{backend}", recipe)]
            lines.append(f"{recipe:12} {'keras-' + backend:14} {_cell([r['oneshot_s'] for r in ks], 's'):>13} "
                         f"{'-':>13} {'-':>11} {_cell([r['peak_rss_mib'] for r in ks], '{:.0f}'):>13} "
                         f"{_cell([r['cpu_s'] for r in ks], 's'):>11} {ks[0]['sparsity']:8.4f}")
            for label, pick in (("keras/ours", statistics.median), ("keras-min/min", min)):
                def kratio(key: str, pick: Any = pick, ks: list[dict[str, Any]] = ks,
                           ours: list[dict[str, Any]] = ours) -> str:
                    return f"{pick(r[key] for r in ks) / pick(r[key] for r in ours):.2f}"

                lines.append(f"{recipe:12} {label:14} {kratio('oneshot_s'):>13} {'-':>13} {'-':>11} "
                             f"{kratio('peak_rss_mib'):>13} {kratio('cpu_s'):>11}")
        if measured:
            continue
        if recipe not in RECORDED:
            lines.append(f"{recipe:12} {'llmc recorded':14} {'-':>13} {'-':>13} {'-':>11} {'-':>13}  (none recorded)")
        else:
            wall, rss = RECORDED[recipe]
            med = statistics.median(r["oneshot_s"] for r in ours)
            lines.append(f"{recipe:12} {'llmc recorded':14} {wall:13.1f} {'-':>13} {'-':>11} {rss:13.0f}")
            lines.append(f"{recipe:12} {'ours/recorded':14} {med / wall:13.2f} {'-':>13} {'-':>11} "
                         f"{statistics.median(r['peak_rss_mib'] for r in ours) / rss:13.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--llmcompressor-python", default=None)
    p.add_argument("--without-llmcompressor", action="store_true",
                   help="do not run llm-compressor; show the README's recorded times")
    p.add_argument("--ours-python", default=sys.executable)
    p.add_argument("--keras", default=None,
                   help="Keras backends to run the keras-hub twin on (default: jax,tensorflow where keras-hub is "
                        "installed; '' for none)")
    p.add_argument("--profile", default=None, help="run ours once under cProfile, stats to this file")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        p.error(f"unknown recipe(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    if a.one or a.profile:
        import torch

        torch.set_num_threads(a.threads)
        result = run_once(a.one or "ours", recipes[0], a.samples, a.profile)
        print(json.dumps(result))
        return 0
    theirs = None if a.without_llmcompressor else _llmcompressor_python(a.llmcompressor_python)
    keras = [k for k in (a.keras if a.keras is not None else _keras_default()).split(",") if k.strip()]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(a.runs):
        for recipe in recipes:
            impls = [("ours", a.ours_python), ("llmcompressor", theirs), *((f"keras-{k}", a.ours_python) for k in keras)]
            for impl, python in impls:
                if python:
                    result = spawn(python, impl, recipe, a.threads, a.samples)
                    print(json.dumps(result), file=sys.stderr, flush=True)  # each run as it ends
                    runs.setdefault((impl, recipe), []).append(result)
    how = (f"llm-compressor measured in this run ({theirs}), interleaved with ours" if theirs else
           "llm-compressor NOT run here: its figures are the README's recorded ones (64 samples, "
           "another run, another moment)")
    print(f"one-shot speed: random Llama 14.7M, {a.samples} x 256 tokens, batch 1, {a.threads} threads, "
          f"{a.runs} run(s) each, min/median; {how}; load average (1 min) {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs")
    print("\n".join(table(runs, recipes, theirs is not None, keras)))
    print("\n".join(estimates(runs, recipes, a.samples, a.threads, keras)))
    return 0


def estimates(runs: dict[tuple[str, str], list[dict[str, Any]]], recipes: list[str], samples: int,
              threads: int, keras: Sequence[str] = ()) -> list[str]:
    """Per recipe, the printed estimate (and its range) against our median measured time; for
    each Keras backend, the estimate from NumPy's rates (the Keras host solves on NumPy arrays)
    against its median."""
    import torch
    from recipe_spec_torch.masks import TORCH_OPS

    from recipe_spec.loader import loads
    from recipe_spec.oneshot.checkpoint import read_model
    from recipe_spec.oneshot.estimate import estimate
    from recipe_spec.oneshot.modifiers import runnable
    from recipe_spec.oneshot.rates import SPREAD, measure

    torch.set_num_threads(threads)
    model, _ = build(samples)
    lines = [f"{'estimate of':12} {'recipe':22} {'estimate s':>11} {'range s':>13} {'measured s':>11} "
             f"{'estimate/measured':>18}"]
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        checkpoint = read_model(folder)
        rates = measure(TORCH_OPS, torch.from_numpy, width=checkpoint.hidden or 512, label="PyTorch")
        numpy_rates = measure(width=checkpoint.hidden or 512, label="NumPy") if keras else None
        for recipe in recipes:
            for impl, r in (("ours", rates), *((f"keras-{k}", numpy_rates) for k in keras)):
                guess = estimate(runnable(loads(RECIPES[recipe])), checkpoint, samples, 256, rates=r).seconds
                measured = statistics.median(run["oneshot_s"] for run in runs[(impl, recipe)])
                name = recipe if impl == "ours" else f"{recipe}:{impl.removeprefix('keras-')}"
                lines.append(f"{'estimate of':12} {name:22} {guess:11.1f} {guess / SPREAD:6.1f}-{guess * SPREAD:<6.1f} "
                             f"{measured:11.2f} {guess / measured:18.2f}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
