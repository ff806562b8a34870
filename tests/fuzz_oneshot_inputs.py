"""Generated inputs of the one-shot surfaces (``benchmarks/fuzz_oneshot.py``): one case is a JSON
dict built from its id alone (``make_case(case_id, backend)``: a ``random.Random`` seeded by
``"{backend}:{case_id}"``), so a case id reruns the same input anywhere.

A case is a valid base run (a recipe of SparseGPT / Wanda / Magnitude pruning, GPTQ /
QuantizationModifier schemes, SmoothQuant, AWQ; tokenised samples; arguments; a tiny random
Llama; maybe an output folder) with one mutation drawn from one generator family:

- ``recipe``: bad types, out-of-range values, unknown keys and modifiers, hostile ``re:`` targets,
  N:M patterns and group sizes that do not divide the widths, unknown ``sequential_targets``,
  GPTQ ``actorder`` values compressed-tensors refuses;
- ``data``: ids out of the vocabulary, negative or float ids, empty samples, attention masks of
  another length, sequences past the model's positions, DataLoaders of tuples, wrong containers,
  a generator that never ends;
- ``args``: counts as strings, floats, negatives, None, bools; unknown keywords; bad pipelines;
- ``model``: a non-finite weight in a later layer, a meta-device model, a model quantized
  before, odd widths, a head tied to the embedding that the recipe compresses (the embedding
  must keep its values);
- ``output``: a file, a read-only folder, a non-empty folder, a sharded checkpoint, a missing
  parent;
- ``valid``: no mutation.

``expect`` says what a correct tool does with the case: ``refuse`` (a clear refusal, nothing
touched), ``run``, or ``any`` (either is correct). A run of a ``refuse`` case is a silent defect.
"""

from __future__ import annotations

import ast
import random
from typing import Any

__all__ = ["make_case", "FAMILIES", "SURFACES"]

FAMILIES = ("valid", "recipe", "data", "args", "model", "output")
SURFACES = ("api", "manager", "cli")

_GROUP = ("config_groups:\n        group_0:\n          targets: [Linear]\n          weights: {{num_bits: {bits}, "
          "type: int, symmetric: true, strategy: group, group_size: {group}}}\n")


def _mod(name: str, body: dict[str, str]) -> str:
    lines = "".join(f"      {k}: {v}\n" for k, v in body.items())
    return f"    {name}:\n{lines}" if lines else f"    {name}: {{}}\n"


def _base_recipe(rng: random.Random, hidden: int) -> tuple[str, str, dict[str, str], str]:
    """(kind, modifier, arguments, stage) of a valid recipe for a model of width ``hidden``."""
    kind = rng.choice(["sparsegpt", "wanda", "magnitude", "gptq", "quant", "smoothquant", "awq"])
    ign = "[lm_head]"
    if kind in ("sparsegpt", "wanda"):
        args = {"sparsity": str(rng.choice([0.3, 0.5, 0.7])), "ignore": ign}
        if rng.random() < 0.5:  # an N:M pattern sets the sparsity (another one is refused, M006)
            args["mask_structure"] = repr(rng.choice(["2:4", "4:8", "0:0"]))
            args["sparsity"] = "0.5" if args["mask_structure"] != "'0:0'" else args["sparsity"]
        return kind, "SparseGPTModifier" if kind == "sparsegpt" else "WandaPruningModifier", args, "sparsity"
    if kind == "magnitude":
        s = str(rng.choice([0.2, 0.5]))
        return kind, "MagnitudePruningModifier", {
            "targets": "['re:model.layers.\\d+.mlp.*_proj$']", "init_sparsity": s, "final_sparsity": s}, "sparsity"
    scheme = rng.choice(["W8A8", "FP8", "FP8_DYNAMIC", "group", "group"])
    args = {"targets": "[Linear]", "ignore": ign}
    if scheme == "group":
        del args["targets"]
        args["_groups"] = _GROUP.format(bits=rng.choice([4, 8]), group=rng.choice([g for g in (8, 16) if hidden % g == 0]))
    else:
        args["scheme"] = scheme
    if kind == "gptq":
        return kind, "GPTQModifier", args, "quant"
    if kind == "quant":
        return kind, "QuantizationModifier", args, "quant"
    if kind == "smoothquant":
        args.pop("_groups", None)
        args["scheme"] = "W8A8"
        return kind, "SmoothQuantModifier", {"smoothing_strength": str(rng.choice([0.5, 0.8]))}, "smooth+" + repr(args)
    args.pop("scheme", None)
    args.pop("targets", None)
    args["_groups"] = _GROUP.format(bits=4, group=8)
    return kind, "AWQModifier", {}, "awq+" + repr(args)


def _render(modifier: str, args: dict[str, str], stage: str) -> str:
    def body(name: str, a: dict[str, str]) -> str:
        a = dict(a)
        groups = a.pop("_groups", None)
        text = _mod(name, a)
        if groups is not None:
            text = (text if a else f"    {name}:\n") + "      " + groups
        return text
    if stage.startswith(("smooth+", "awq+")):
        follow = ast.literal_eval(stage.split("+", 1)[1])  # the second modifier's arguments
        second = "GPTQModifier" if stage.startswith("smooth+") else "QuantizationModifier"
        return ("quant_stage:\n  quant_modifiers:\n" + body(modifier, args) + body(second, follow))
    return f"{stage}_stage:\n  {stage}_modifiers:\n" + body(modifier, args)


# -- mutations: (family, name, expect) -> change the case in place -------------------------------------

def _mut_recipe(rng: random.Random, case: dict[str, Any], modifier: str,
                args: dict[str, str]) -> tuple[str, str, str]:
    hidden = case["model"]["hidden"]
    options = ["bad-type", "out-of-range", "unknown-key", "unknown-modifier", "hostile-regex", "bad-regex",
               "nm-not-dividing", "group-not-dividing", "unknown-seq-targets", "no-stage", "empty-recipe", "garbage",
               "top-list", "recipe-not-text", "unknown-scheme", "targets-none-match", "as-path", "bad-mapping",
               "bad-actorder"]
    name = rng.choice(options)
    expect = "refuse"
    if name == "bad-type":  # (a string where a list of names goes is one name: not a bad type)
        key = rng.choice(list(k for k in args if not k.startswith("_")) or ["sparsity"])
        args[key] = rng.choice(["{a: 1}", "5", "[1, 2]"] if key in ("targets", "ignore")
                               else ["'half'", "[0.5, 0.6]", "{a: 1}", "true"])
    elif name == "out-of-range":
        if modifier in ("SparseGPTModifier", "WandaPruningModifier"):
            args["sparsity"] = rng.choice(["1.5", "-0.1", "1.0", "2"])
        elif modifier == "SmoothQuantModifier":
            args["smoothing_strength"] = rng.choice(["1.5", "-1", "2"])
        elif modifier == "MagnitudePruningModifier":
            args["final_sparsity"] = args["init_sparsity"] = rng.choice(["1.5", "-0.2"])
        elif "_groups" in args:
            args["_groups"] = _GROUP.format(bits=rng.choice([0, -4, 33]), group=8)
        else:
            args["dampening_frac" if modifier == "GPTQModifier" else "scheme"] = rng.choice(["-1", "'W0A16'"])
            if modifier != "GPTQModifier":
                expect = "refuse"
    elif name == "unknown-key":
        args[rng.choice(["spars1ty", "targetz", "unknown_key", "blocksize"])] = "1"
    elif name == "unknown-modifier":
        modifier = rng.choice(["SparseGTPModifier", "GPTQModifer", "NoSuchModifier"])
    elif name in ("hostile-regex", "bad-regex"):
        pattern = rng.choice(["re:(a+)+$", "re:(.*a){12}", "re:(x|x)*y"] if name == "hostile-regex"
                             else ["re:[", "re:(?P<", "re:*a"])
        args[rng.choice(["targets", "ignore"])] = f"['{pattern}']"
        expect = "any" if name == "hostile-regex" else "refuse"  # a linear-time matcher may take it
    elif name == "nm-not-dividing":
        modifier = rng.choice(["SparseGPTModifier", "WandaPruningModifier"])
        args.clear()
        args.update({"sparsity": "0.5", "ignore": "[lm_head]", "mask_structure": repr(rng.choice(["3:7", "5:4", "2:0", "2:48"]))})
        case["stage"] = "sparsity"
    elif name == "group-not-dividing":
        modifier = rng.choice(["GPTQModifier", "QuantizationModifier"])
        args.clear()
        args.update({"ignore": "[lm_head]"})
        args["_groups"] = _GROUP.format(bits=4, group=rng.choice([g for g in (24, 40, 96, 128) if hidden % g]))
        case["stage"] = "quant"
    elif name == "unknown-seq-targets":
        modifier = rng.choice(["SparseGPTModifier", "GPTQModifier"])
        args.clear()
        args.update({"sequential_targets": "[NoSuchDecoderLayer]", "ignore": "[lm_head]"})
        args.update({"sparsity": "0.5"} if modifier == "SparseGPTModifier" else {"scheme": "W8A8", "targets": "[Linear]"})
        case["stage"] = "sparsity" if modifier == "SparseGPTModifier" else "quant"
    elif name == "unknown-scheme":
        modifier = rng.choice(["GPTQModifier", "QuantizationModifier"])
        args.clear()
        args.update({"targets": "[Linear]", "scheme": rng.choice(["W5A16", "W8A8_FOO", "INT3"])})
        case["stage"] = "quant"
    elif name == "targets-none-match":
        args["targets"] = "[NoSuchLinear]"
        expect = "any"
    elif name == "bad-mapping":
        modifier = "SmoothQuantModifier"
        args.clear()
        args["mappings"] = "[[['re:.*no_such_proj'], 're:.*input_layernorm']]"
        case["stage"] = "smooth+" + repr({"scheme": "W8A8", "targets": "[Linear]", "ignore": "[lm_head]"})
    elif name == "bad-actorder":  # compressed-tensors 0.19 refuses these (group and dynamic were removed)
        modifier = "GPTQModifier"
        args.clear()
        args.update({"scheme": "W8A8", "targets": "[Linear]", "ignore": "[lm_head]",
                     "actorder": rng.choice(["group", "dynamic", "true", "sideways", "GROUP"])})
        case["stage"] = "quant"
    elif name == "as-path":
        case["recipe_as"] = "path"
        expect = "run"
    return name, expect, modifier


def _mut_data(rng: random.Random, case: dict[str, Any]) -> tuple[str, str]:
    vocab, positions = case["model"]["vocab"], case["model"]["positions"]
    samples = case["data"]["samples"]
    name = rng.choice(["id-out-of-vocab", "negative-id", "float-id", "empty-sample", "mask-longer", "mask-shorter",
                       "past-positions", "tuple-loader", "dataloader", "one-dict", "list-of-lists", "strings",
                       "no-samples", "none", "nested-ids", "mask-not-binary", "generator", "tensors", "dataset",
                       "endless"])
    expect = "refuse"
    i = 0  # fed: the first samples are taken when not shuffled
    case["args"]["shuffle_calibration_samples"] = False
    if name == "id-out-of-vocab":
        samples[i]["input_ids"][0] = vocab + rng.choice([0, 1, 1000])
    elif name == "negative-id":
        samples[i]["input_ids"][0] = -rng.choice([1, 5])
    elif name == "float-id":
        samples[i]["input_ids"][0] = 1.5
    elif name == "empty-sample":
        samples[i] = {"input_ids": [], "attention_mask": []}
    elif name == "mask-longer":
        samples[i]["attention_mask"] = samples[i]["attention_mask"] + [1, 1, 1]
    elif name == "mask-shorter":
        samples[i]["attention_mask"] = samples[i]["attention_mask"][:-2]
    elif name == "mask-not-binary":
        samples[i]["attention_mask"][0] = 7
    elif name == "past-positions":
        samples[i] = {"input_ids": [rng.randrange(vocab) for _ in range(positions + 5)],
                      "attention_mask": [1] * (positions + 5)}
        expect = "any"
    elif name == "nested-ids":
        samples[i]["input_ids"] = [samples[i]["input_ids"]]
        expect = "any"
    elif name in ("tuple-loader", "dataloader", "one-dict", "list-of-lists", "strings", "no-samples", "none",
                  "generator", "tensors", "dataset", "endless"):
        case["data"]["kind"] = name
        expect = {"dataloader": "run", "generator": "run", "tensors": "run", "dataset": "run",
                  "list-of-lists": "run", "endless": "run"}.get(name, "refuse")
    return name, expect


def _mut_args(rng: random.Random, case: dict[str, Any]) -> tuple[str, str]:
    a = case["args"]
    name = rng.choice(["samples-str", "samples-float", "samples-neg", "samples-zero", "samples-none", "samples-bool",
                       "batch-float", "batch-neg", "batch-str", "batch-big", "unknown-kw", "bad-pipeline",
                       "seq-targets-unknown", "seq-targets-hostile", "seq-targets-int", "shuffle-str", "seed-str",
                       "compat-bad", "compat-other-tool", "recipe-args-unknown", "collator", "offload-gpu",
                       "pipeline-sequential", "pipeline-datafree", "overwrite-str"])
    expect = "refuse"
    if name.startswith("samples-"):
        a["num_calibration_samples"] = {"samples-str": "4", "samples-float": 2.5, "samples-neg": -3, "samples-zero": 0,
                                        "samples-none": None, "samples-bool": True}[name]
    elif name.startswith("batch-"):
        a["batch_size"] = {"batch-float": 2.5, "batch-neg": -1, "batch-str": "2", "batch-big": 1000}[name]
        expect = "run" if name == "batch-big" else "refuse"
    elif name == "unknown-kw":
        key = rng.choice(["max_seq_length", "num_calibration_sample", "foo"])
        a[key] = 4
        if key == "max_seq_length":  # llm-compressor's keyword: oneshot() honours it, manager.apply refuses it
            expect = "any"
    elif name == "bad-pipeline":
        a["pipeline"] = rng.choice(["basic", "", "Sequential"])
    elif name == "seq-targets-unknown":
        a["sequential_targets"] = ["NoSuchDecoderLayer"]
        a["pipeline"] = "sequential"
    elif name == "seq-targets-hostile":
        a["sequential_targets"] = [rng.choice(["re:(a+)+$", "re:["])]
    elif name == "seq-targets-int":
        a["sequential_targets"] = rng.choice([5, [5]])
    elif name == "shuffle-str":
        a["shuffle_calibration_samples"] = "no"
    elif name == "seed-str":
        a["seed"] = "x"
    elif name == "compat-bad":
        a["compat"] = rng.choice(["llmcompressor==0.3", "llmcompressor==abc"])
    elif name == "compat-other-tool":
        a["compat"] = "sparseml"
    elif name == "recipe-args-unknown":
        a["recipe_args"] = {"no_such_variable": 1}
    elif name == "collator":
        a["data_collator"] = "padding"
    elif name == "offload-gpu":  # no such device here
        a["sequential_offload_device"] = "cuda:7"
        a["pipeline"] = "sequential"
    elif name.startswith("pipeline-"):
        a["pipeline"] = name.split("-", 1)[1]
        expect = "any"
    elif name == "overwrite-str":
        a["overwrite_output_dir"] = "no"
        case["output"]["kind"] = "nonempty"
    return name, expect


def _mut_model(rng: random.Random, case: dict[str, Any], backend: str) -> tuple[str, str]:
    m = case["model"]
    name = rng.choice(["nan-weight", "inf-weight", "meta", "quantized-before", "odd-widths", "training-mode", "tied-head"]
                      if backend == "torch" else ["nan-weight", "inf-weight", "quantized-before", "odd-widths"])
    expect = "any"
    if name in ("nan-weight", "inf-weight"):
        m["variant"] = name
    elif name == "meta":
        m["variant"] = "meta"
        expect = "refuse"
    elif name == "quantized-before":
        m["variant"] = "quantized-before"
    elif name == "odd-widths":
        m["hidden"], m["intermediate"] = rng.choice([(24, 40), (24, 22), (48, 36)])
    elif name == "tied-head":  # lm_head shares the embedding's weight and the recipe compresses it
        m["variant"] = "tied-head"
    elif name == "training-mode":
        m["variant"] = "training"
        expect = "run"
    return name, expect


def _mut_output(rng: random.Random, case: dict[str, Any]) -> tuple[str, str]:
    name = rng.choice(["new", "empty", "file", "readonly", "nonempty", "nonempty-force", "sharded", "sharded-force",
                       "missing-parent", "parent-is-file", "empty-string"])
    case["output"]["kind"] = name
    if name in ("nonempty-force", "sharded-force"):
        case["args"]["overwrite_output_dir"] = True
    expect = {"new": "run", "empty": "run", "nonempty-force": "run", "sharded-force": "run",
              "missing-parent": "any", "readonly": "any"}.get(name, "refuse")
    return name, expect


_DATA_ARGS = ("samples-", "batch-", "shuffle-", "seed-", "seq-targets-", "offload-", "pipeline-")


def needs_data(kind: str, case: dict[str, Any]) -> bool:
    """Whether the base recipe reads calibration data (a static-activation FP8 scheme does)."""
    return kind in ("sparsegpt", "wanda", "gptq", "smoothquant", "awq") or (
        kind == "quant" and "scheme: FP8\n" in case["_base_text"])


def make_case(case_id: int, backend: str = "torch", surface: str | None = None) -> dict[str, Any]:
    """The case ``case_id`` of ``backend`` (``torch`` or ``keras``); ``surface`` forces one."""
    rng = random.Random(f"{backend}:{case_id}")
    if surface is None:
        surface = rng.choices(SURFACES, weights=[6, 2, 2 if backend == "torch" else 0])[0]
    hidden = rng.choice([16, 32, 48, 64])
    model = {"vocab": rng.choice([64, 96]), "hidden": hidden, "intermediate": rng.choice([2, 3]) * hidden,
             "heads": rng.choice([h for h in (2, 4) if (hidden // h) % 2 == 0]), "layers": 2, "positions": 32,
             "variant": "plain"}
    kind, modifier, args, stage = _base_recipe(rng, hidden)
    n = rng.randint(2, 6)
    samples = []
    for _ in range(n):
        length = rng.randint(4, 12)
        samples.append({"input_ids": [rng.randrange(model["vocab"]) for _ in range(length)], "attention_mask": [1] * length})
    case: dict[str, Any] = {
        "id": case_id, "backend": backend, "surface": surface, "base": kind, "stage": stage, "model": model,
        "data": {"kind": "list", "samples": samples, "keras_names": rng.random() < 0.5},
        "args": {"num_calibration_samples": rng.choice([2, 4, 8]), "shuffle_calibration_samples": rng.random() < 0.5,
                 "batch_size": rng.choice([1, 1, 2])},
        "output": {"kind": rng.choice(["none", "none", "new"])}, "recipe_as": rng.choice(["text", "text", "path"]),
    }
    case["_base_text"] = _render(modifier, args, stage)
    family = rng.choices(FAMILIES, weights=[1, 3, 3, 2, 1, 2])[0]
    mutation, expect = "none", "run"
    if family == "recipe":
        mutation, expect, modifier = _mut_recipe(rng, case, modifier, args)
    elif family == "data":
        mutation, expect = _mut_data(rng, case)
        if not needs_data(kind, case) and expect == "refuse":  # runs without data: need not read it
            expect = "any"
    elif family == "args":
        mutation, expect = _mut_args(rng, case)
        if not needs_data(kind, case) and mutation.startswith(_DATA_ARGS) and expect == "refuse":
            expect = "any"  # an argument of the calibration data, which this recipe does not read
    elif family == "model":
        mutation, expect = _mut_model(rng, case, backend)
    elif family == "output":
        mutation, expect = _mut_output(rng, case)
    if backend == "keras" and expect == "run":
        expect = "any"  # a scheme keras holds no layer for is refused, located
    if family != "recipe":
        case["recipe"] = _render(modifier, args, case["stage"])
        if mutation == "tied-head" and case["surface"] != "cli":
            case["recipe"] = case["recipe"].replace("ignore: [lm_head]", "ignore: []")
    elif mutation == "no-stage":
        case["recipe"] = _mod(modifier, {k: v for k, v in args.items() if not k.startswith("_")})
    elif mutation == "empty-recipe":
        case["recipe"] = ""
    elif mutation == "garbage":
        case["recipe"] = rng.choice(["{{{", "a: [1,", "- 1\n- 2\n", "\t:\n"])
    elif mutation == "top-list":
        case["recipe"] = "- " + _render(modifier, args, case["stage"]).replace("\n", "\n  ")
    elif mutation == "recipe-not-text":
        case["recipe"] = None
        case["recipe_as"] = rng.choice(["int", "dict"])
    else:
        case["recipe"] = _render(modifier, args, case["stage"])
    if surface == "cli":  # the command line reads what a file holds: a few keyword-level cases mean nothing
        if family == "args" and mutation not in ("samples-neg", "samples-zero", "batch-neg", "batch-big", "bad-pipeline",
                                                 "seq-targets-unknown", "seq-targets-hostile", "compat-bad",
                                                 "compat-other-tool", "recipe-args-unknown", "pipeline-sequential",
                                                 "pipeline-datafree"):
            family, mutation, expect = "valid", "none", "run"
            case["args"] = {"num_calibration_samples": 4, "batch_size": 1}
            if case["output"]["kind"] == "nonempty":  # overwrite-str's folder
                case["output"]["kind"] = "new"
        if family == "model" and mutation in ("meta", "training-mode", "quantized-before", "tied-head"):
            family, mutation, expect = "valid", "none", "run"
            case["model"]["variant"] = "plain"
        if mutation == "recipe-not-text":
            case["recipe"], case["recipe_as"] = "", "path"
        if family == "data" and mutation in ("tensors", "dataset", "generator", "endless", "dataloader", "tuple-loader", "none",
                                             "mask-longer", "mask-shorter", "mask-not-binary"):
            case["data"] = {"kind": "list", "samples": [
                {"input_ids": s["input_ids"]} for s in case["data"]["samples"]], "keras_names": False}
            family, mutation, expect = "valid", "none", "run"
        if mutation == "list-of-lists":  # a format the calibration file takes
            expect = "run"
    if backend == "keras":  # keras-hub's own input names; a Llama built in memory or loaded from a checkpoint
        case["data"]["keras_names"] = rng.random() < 0.2
        case["model"]["origin"] = rng.choice(["memory", "checkpoint"])
        if case["model"]["origin"] == "memory":  # no checkpoint names: the head is the reverse embeddings
            case["recipe"] = (case["recipe"] or "").replace("ignore: [lm_head]", "ignore: [lm_head, 're:.*reverse_embeddings$']")
    del case["_base_text"]
    case.update(family=family, mutation=mutation, expect=expect)
    return case
