"""llm-compressor 0.14 users' scripts with ``from recipe_spec import oneshot``: a checkpoint
folder as ``model``, text calibration data tokenised with llm-compressor's rules, modifier
objects as ``recipe``, ``model.save_pretrained(dir)`` after the run, and every keyword of
llm-compressor's ``oneshot()`` honoured or refused by name (the list below is copied from
llm-compressor 0.14's ``entrypoints/oneshot.py`` and ``args/*_arguments.py``, not from the
code under test). Tiny random Llama and character tokenizer: tests/dropin_common.py."""

from __future__ import annotations

import inspect
import json
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
pytest.importorskip("tokenizers")

import dropin_common as dc  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402
from recipe_spec.oneshot.inputs import TextOptions, calibration_input  # noqa: E402
from recipe_spec.oneshot.keywords import LLMCOMPRESSOR_KEYWORDS  # noqa: E402

#: llm-compressor 0.14: ``oneshot()``'s parameters, then the fields of ModelArguments,
#: DatasetArguments (with CustomDatasetArguments, DVCDatasetArguments) and RecipeArguments
#: that only reach it through ``**kwargs`` (HfArgumentParser.parse_dict).
LLMC_SIGNATURE = (
    "model config_name tokenizer processor precision tie_word_embeddings trust_remote_code_model save_compressed "
    "model_revision recipe recipe_args clear_sparse_session stage dataset dataset_config_name dataset_path splits "
    "batch_size data_collator num_calibration_samples shuffle_calibration_samples max_seq_length pad_to_max_length "
    "text_column concatenate_data streaming overwrite_cache preprocessing_num_workers dataloader_num_workers "
    "min_tokens_per_module moe_calibrate_all_experts pipeline tracing_ignore sequential_targets "
    "sequential_offload_device quantization_aware_calibration sequential_prefetch output_dir log_dir "
    "enable_compile").split()
LLMC_KWARGS_ONLY = ("dvc_data_repository remove_columns preprocessing_func raw_kwargs sequential_targets_per_subgraph "
                    "propagate_error use_loss_mask").split()
#: A value other than llm-compressor's default for each keyword recipe-spec runs only at its default.
OTHER_VALUE: dict[str, Any] = {
    "tie_word_embeddings": False, "model_revision": "v2", "stage": "quant", "dvc_data_repository": "repo",
    "data_collator": "padding", "streaming": True, "dataloader_num_workers": 2, "min_tokens_per_module": 0.1,
    "sequential_targets_per_subgraph": 2, "propagate_error": False, "use_loss_mask": True,
    "sequential_prefetch": True, "enable_compile": True,
}
GPTQ_YAML = """default_stage:
  default_modifiers:
    GPTQModifier:
      targets: Linear
      scheme: W4A16
      ignore: [lm_head]
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return dc.checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-llama")


def _gptq() -> Any:
    from recipe_spec.modifiers.gptq import GPTQModifier

    return GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])


# -- keywords ------------------------------------------------------------------------------------
def test_the_table_holds_every_llmcompressor_keyword_and_no_other() -> None:
    assert set(LLMCOMPRESSOR_KEYWORDS) == set(LLMC_SIGNATURE) | set(LLMC_KWARGS_ONLY)
    assert {k.status for k in LLMCOMPRESSOR_KEYWORDS.values()} == {"runs", "default", "moot"}
    params = inspect.signature(recipe_spec.oneshot).parameters
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())
    # a keyword the run honours is a named parameter (typed, documented), never left to **kwargs
    runs = {k for k, v in LLMCOMPRESSOR_KEYWORDS.items() if v.status == "runs"}
    assert runs - set(params) == set()


def test_the_docs_hold_the_keyword_table() -> None:
    from recipe_spec.oneshot.keywords import table

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "oneshot.md").read_text(encoding="utf-8")
    assert table() in text


@pytest.mark.parametrize("name", sorted(OTHER_VALUE))
def test_a_keyword_run_only_at_its_default_is_refused_by_name_before_anything_changes(name: str) -> None:
    assert LLMCOMPRESSOR_KEYWORDS[name].status == "default"
    model = dc.llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as err:
        recipe_spec.oneshot(model=model, recipe=_gptq(), dataset=dc.TEXTS, tokenizer=dc.tokenizer(),
                            **{name: OTHER_VALUE[name]})
    assert str(err.value).startswith(f"{name}=") and "does not run it" in str(err.value)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_every_default_status_keyword_has_a_refusal_test() -> None:
    assert {k for k, v in LLMCOMPRESSOR_KEYWORDS.items() if v.status == "default"} == set(OTHER_VALUE)


def test_a_keyword_neither_tool_takes_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="'num_calibration_sample'.*neither llm-compressor"):
        recipe_spec.oneshot(model=dc.llama(), recipe=_gptq(), num_calibration_sample=4)


def test_keywords_with_nothing_to_act_on_and_llmcompressor_defaults_run(tmp_path: pathlib.Path) -> None:
    model = dc.llama()
    defaults = {k: v.default for k, v in LLMCOMPRESSOR_KEYWORDS.items()
                if k not in ("model", "recipe", "dataset", "output_dir", "log_dir") and v.default is not None}
    defaults["sequential_offload_device"] = "cpu"
    moot = {"tracing_ignore": ["f"], "clear_sparse_session": True, "overwrite_cache": True,
            "quantization_aware_calibration": False, "remove_columns": ["x"]}
    assert {k for k, v in LLMCOMPRESSOR_KEYWORDS.items() if v.status == "moot"} == set(moot)
    out = recipe_spec.oneshot(model=model, recipe=_gptq(), dataset=dc.TEXTS, tokenizer=dc.tokenizer(),
                              log_dir=tmp_path / "logs",
                              **{**defaults, **moot, "num_calibration_samples": 2, "max_seq_length": 16})
    assert out is model and model.model.layers[0].mlp.down_proj.weight_scale.shape == (128, 2)
    (log,) = (tmp_path / "logs").iterdir()
    assert log.name.startswith("oneshot_") and log.suffix == ".log"


def test_recipe_args_as_llmcompressor_strings() -> None:
    from recipe_spec.oneshot.keywords import recipe_arguments

    assert recipe_arguments(["sparsity=0.5", "scheme=W4A16"]) == {"sparsity": "0.5", "scheme": "W4A16"}
    with pytest.raises(ValueError, match="'sparsity' is not 'name=value'"):
        recipe_arguments(["sparsity"])


def test_tokenizer_and_processor_together_are_refused() -> None:
    tok = dc.tokenizer()
    with pytest.raises(ValueError, match="tokenizer= or processor=, not both"):
        recipe_spec.oneshot(model=dc.llama(), recipe=_gptq(), dataset=dc.TEXTS, tokenizer=tok, processor=tok)


# -- the model as a checkpoint folder ------------------------------------------------------------------
def test_a_checkpoint_folder_is_loaded_with_its_tokenizer(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    model = recipe_spec.oneshot(model=str(folder), recipe=_gptq(), dataset=dc.TEXTS, max_seq_length=16,
                                num_calibration_samples=2, output_dir=tmp_path / "out")
    assert isinstance(model, transformers.LlamaForCausalLM) and model.dtype == torch.float32
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(model.model.embed_tokens.weight, reference.model.embed_tokens.weight)
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "config.json", "recipe.yaml"} <= names


def test_a_tokenizer_named_by_its_folder_is_loaded(folder: pathlib.Path) -> None:
    from recipe_spec.oneshot.dropin import resolve_processor

    loaded = resolve_processor(dc.llama(), None, str(folder), None)
    assert loaded("ab")["input_ids"] == _ids("ab")
    with pytest.raises(ValueError, match=r"processor='/no/such/folder': transformers cannot load"):
        resolve_processor(dc.llama(), None, None, "/no/such/folder")
    assert resolve_processor(dc.llama(), None, None, None) is None  # nothing to load: no folder


def test_precision_picks_the_dtype_and_auto_keeps_the_checkpoints(tmp_path: pathlib.Path) -> None:
    from recipe_spec.oneshot.dropin import load_model

    half = dc.checkpoint(tmp_path / "bf16", dtype=torch.bfloat16)
    assert load_model(str(half))[0].dtype == torch.bfloat16
    assert load_model(half, precision="float32")[0].dtype == torch.float32
    assert load_model(str(half), precision="half")[0].dtype == torch.float16
    with pytest.raises(ValueError, match="precision='float32' applies when model= is a checkpoint folder"):
        load_model(dc.llama(), precision="float32")


@pytest.mark.parametrize("given, says", [
    ("meta-llama/No-Such-Model-Here", "not a folder here, and a hub id that is not in the local cache"),
    ("__file__", "is a file: pass a Hugging Face checkpoint folder"),
])
def test_a_model_path_that_cannot_be_loaded_is_a_clear_error(given: str, says: str, tmp_path: pathlib.Path) -> None:
    if given == "__file__":
        given = str(tmp_path / "model.bin")
        pathlib.Path(given).write_bytes(b"x")
    with pytest.raises(ValueError) as err:
        recipe_spec.oneshot(model=given, recipe=_gptq())
    assert str(err.value).startswith(f"model={given!r}") and says in str(err.value)


# -- text calibration data ----------------------------------------------------------------------
def _ids(text: str) -> list[int]:
    return [1] + [dc.char_id(c) for c in text]


def test_text_is_tokenised_as_llmcompressor_does() -> None:
    tok = dc.tokenizer()
    texts = ["hello world", "hi"]
    padded = calibration_input(texts, tok, TextOptions(max_seq_length=5))
    # truncation to max_seq_length with <s> in front; padding to it with the eos token (no pad token)
    assert padded == [{"input_ids": _ids("hell"), "attention_mask": [1] * 5},
                      {"input_ids": _ids("hi") + [2, 2], "attention_mask": [1, 1, 1, 0, 0]}]
    assert tok.pad_token == "</s>" and tok.backend_tokenizer.truncation is None
    assert tok.backend_tokenizer.padding is None
    plain = calibration_input([{"content": t} for t in texts], tok,
                              TextOptions(max_seq_length=5, pad_to_max_length=False, text_column="content"))
    assert [s["input_ids"] for s in plain] == [_ids("hell"), _ids("hi")]
    # model_max_length (64) bounds max_seq_length
    long = calibration_input(["x" * 100], tok, TextOptions(max_seq_length=1000, pad_to_max_length=False))
    assert len(long[0]["input_ids"]) == 64


def test_concatenate_data_joins_samples_into_full_chunks() -> None:
    joined = calibration_input(["abc", "defg", "h"], dc.tokenizer(), TextOptions(max_seq_length=4,
                                                                                 concatenate_data=True))
    stream = _ids("abc") + _ids("defg")[:4] + _ids("h")  # each sample cut to 4 first, then joined
    assert [s["input_ids"] for s in joined] == [stream[i:i + 4] for i in range(0, 8, 4)]
    assert all(s["attention_mask"] == [1] * 4 for s in joined)


@pytest.mark.parametrize("kind", ["datasets", "stand-in"])
def test_a_datasets_table_is_tokenised_with_its_own_map(kind: str) -> None:
    datasets = pytest.importorskip("datasets") if kind == "datasets" else None
    make = datasets.Dataset.from_dict if datasets is not None else dc.Table.from_dict
    table = make({"text": ["hello world", "hi"], "id": [0, 1]})
    out = calibration_input(table, dc.tokenizer(), TextOptions(max_seq_length=5, pad_to_max_length=False))
    assert out.column_names == ["input_ids", "attention_mask"] and out[0]["input_ids"] == _ids("hell")
    joined = calibration_input(make({"text": ["abc", "defg", "h"]}), dc.tokenizer(),
                               TextOptions(max_seq_length=4, concatenate_data=True))
    assert [joined[i]["input_ids"] for i in range(len(joined))] == [[1, *_ids("abc")[1:]], [*_ids("defg")[:4]]]
    if datasets is not None:
        splits = datasets.DatasetDict({"train": table, "test": table.select([0])})
        assert len(calibration_input(splits, dc.tokenizer(), TextOptions(max_seq_length=5))) == 2


def test_tokenised_samples_are_cut_to_max_seq_length() -> None:
    samples = [{"input_ids": list(range(10)), "attention_mask": [1] * 10}, {"input_ids": [5, 6]}]
    out = calibration_input(samples, None, TextOptions(max_seq_length=4))
    assert out == [{"input_ids": [0, 1, 2, 3], "attention_mask": [1] * 4}, {"input_ids": [5, 6]}]
    assert calibration_input(samples, None, TextOptions()) is samples


@pytest.mark.parametrize("dataset, options, says", [
    ("open_platypus", {}, "cannot be loaded here"),
    (["some text"], {}, "dataset holds text, and no tokenizer"),
    (["some text"], {"preprocessing_num_workers": 2}, "a list is tokenised in this process"),
    (["some text"], {"preprocessing_func": "f.py:prep"}, "takes a function"),
])
def test_data_recipe_spec_cannot_read_is_refused(dataset: Any, options: dict[str, Any], says: str) -> None:
    tok = None if says.startswith("dataset holds") else dc.tokenizer()
    with pytest.raises(ValueError, match=says):
        recipe_spec.oneshot(model=dc.llama(), recipe=_gptq(), dataset=dataset, tokenizer=tok, **options)


# -- modifier objects ---------------------------------------------------------------------------
def test_modifier_classes_import_from_llmcompressors_paths() -> None:
    import importlib

    paths = {
        "quantization": ["GPTQModifier", "QuantizationModifier"], "gptq": ["GPTQModifier"],
        "smoothquant": ["SmoothQuantModifier"], "awq": ["AWQModifier", "AWQMapping"],
        "obcq": ["SparseGPTModifier"], "autoround": ["AutoRoundModifier"],
        "logarithmic_equalization": ["LogarithmicEqualizationModifier"],
        "pruning": ["SparseGPTModifier", "WandaPruningModifier", "MagnitudePruningModifier",
                    "ConstantPruningModifier", "REAPPruningModifier"],
        "transform": ["AWQModifier", "SmoothQuantModifier", "QuIPModifier", "SpinQuantModifier"],
        "transform.awq": ["AWQModifier", "AWQMapping"], "transform.smoothquant": ["SmoothQuantModifier"],
        "transform.quip": ["QuIPModifier"], "transform.spinquant": ["SpinQuantModifier"],
    }
    for module, names in paths.items():
        found = importlib.import_module(f"recipe_spec.modifiers.{module}")
        for name in names:
            cls = getattr(found, name)
            if name == "AWQModifier" and module == "awq":  # llm-compressor's deprecated shim
                with pytest.warns(DeprecationWarning):
                    transform, quant = cls(scheme="W4A16_ASYM", duo_scaling="both")
                assert (transform.args, quant.type, quant.args) == ({"duo_scaling": "both"}, "QuantizationModifier",
                                                                     {"scheme": "W4A16_ASYM"})
                continue
            assert name == "AWQMapping" or cls(targets="x").type == name
    # the training catalogue (SparseML's !Modifier declarations) is as it was
    from recipe_spec.modifiers import all_specs, pruning, quantization

    assert "GPTQModifier" not in all_specs() and all_specs()["QuantizationModifier"] in quantization.SPECS
    assert all(type(s).__name__ == "ModifierSpec" for s in pruning.SPECS)


def test_an_object_recipe_runs_as_its_yaml_does() -> None:
    by_yaml, by_object = dc.llama(), dc.llama()
    tok = dc.tokenizer()
    kwargs = {"dataset": dc.TEXTS, "tokenizer": tok, "max_seq_length": 16, "num_calibration_samples": 3}
    recipe_spec.oneshot(model=by_yaml, recipe=GPTQ_YAML, **kwargs)
    recipe_spec.oneshot(model=by_object, recipe=[[_gptq()]], **kwargs)
    a, b = by_yaml.state_dict(), by_object.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert "model.layers.1.self_attn.o_proj.weight_scale" in a


def test_an_unknown_argument_of_an_object_is_located_in_the_generated_recipe() -> None:
    from recipe_spec.modifiers.quantization import GPTQModifier
    from recipe_spec.modifiers.smoothquant import SmoothQuantModifier

    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=dc.llama(), recipe=[SmoothQuantModifier(smoothing_strength=0.8),
                                                      GPTQModifier(scheme="W8A8", dampening=0.1)],
                            dataset=dc.TEXTS)  # checked before the text would need a tokenizer
    (d,) = err.value.diagnostics
    # line 1 default_stage, 2 default_modifiers, 3 comment, 4 SmoothQuantModifier, 5 its arg,
    # 6 comment "recipe[1]", 7 GPTQModifier, 8 scheme, 9 dampening
    assert d.code == "M002" and (d.line, d.column) == (9, 7)
    assert "GPTQModifier" in d.message and "dampening" in d.message and "<recipe from modifier objects>" in str(d)


def test_an_object_the_run_cannot_do_is_refused_located() -> None:
    from recipe_spec.modifiers.autoround import AutoRoundModifier

    with pytest.raises(RecipeError) as err:  # asymmetric static inputs: auto-round calibrates symmetric ones
        recipe_spec.oneshot(model=dc.llama(), recipe=AutoRoundModifier(
            config_groups={"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "strategy": "channel"},
                                 "input_activations": {"num_bits": 8, "strategy": "tensor", "dynamic": False,
                                                       "symmetric": False}}},
            targets="Linear", ignore=["lm_head"]), dataset=dc.TEXTS, tokenizer=dc.tokenizer())
    assert [d.code for d in err.value.diagnostics] == ["B001"] and err.value.diagnostics[0].line == 5  # config_groups
    assert "static input activations" in err.value.diagnostics[0].message


def _not_run_in_one_shot() -> list[str]:
    from recipe_spec.stage_dialect import all_stage_names

    ran = {"AWQModifier", "AutoRoundModifier", "ConstantPruningModifier", "GPTQModifier",
           "LogarithmicEqualizationModifier", "MagnitudePruningModifier", "QuantizationModifier", "QuIPModifier",
           "REAPPruningModifier", "SmoothQuantModifier", "SparseGPTModifier", "SpinQuantModifier",
           "WandaPruningModifier"}  # torch's oneshot_modifiers
    return [n for n in all_stage_names() if n not in ran]


@pytest.mark.parametrize("name", _not_run_in_one_shot())
def test_every_other_modifier_validate_knows_is_refused_located(name: str) -> None:
    from recipe_spec.modifiers.objects import ModifierObject

    model = dc.llama()
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=[ModifierObject.of(name, targets=["Linear"])])
    assert err.value.diagnostics and all(d.line is not None and d.line >= 4 for d in err.value.diagnostics)
    assert "<recipe from modifier objects>" in str(err.value) and name in str(err.value)
    assert not any(hasattr(m, "quantization_scheme") for m in model.modules())


def test_quantizing_attention_modules_is_refused_located_before_anything_is_attached() -> None:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    from recipe_spec.modifiers.quantization import QuantizationModifier

    # llm-compressor's examples/quantization_attention/llama3_attention.py recipe
    scheme = QuantizationScheme(targets=["LlamaAttention"],
                                input_activations=QuantizationArgs(num_bits=8, type="float", strategy="tensor"))
    model = dc.llama()
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=QuantizationModifier(config_groups={"attention": scheme}),
                            dataset=dc.TEXTS, tokenizer=dc.tokenizer(), max_seq_length=8)
    (d,) = err.value.diagnostics
    assert d.code == "B001" and d.line == 5 and "model.layers.0.self_attn (LlamaAttention)" in d.message
    assert not any(hasattr(m, "quantization_scheme") for m in model.modules())


@pytest.mark.parametrize("recipe, recipe_args, says", [
    (["a.yaml", "b.yaml"], None, r"recipe\[0\] is a str: a recipe list holds modifier objects only"),
    ("__gptq__", ["x=1"], "recipe_args set the variables of a YAML recipe"),
])
def test_recipes_llmcompressor_cannot_run_either_are_type_errors(recipe: Any, recipe_args: Any, says: str) -> None:
    recipe = _gptq() if recipe == "__gptq__" else recipe
    with pytest.raises(TypeError, match=says):
        recipe_spec.oneshot(model=dc.llama(), recipe=recipe, recipe_args=recipe_args)


def test_quantization_schemes_of_compressed_tensors_become_recipe_text() -> None:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    from recipe_spec.modifiers.quantization import QuantizationModifier
    from recipe_spec.modifiers.transform.awq import AWQMapping, AWQModifier
    from recipe_spec.oneshot.objects import object_recipe

    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(num_bits=8, symmetric=True,
                                                                             strategy="channel"))
    recipe = object_recipe([AWQModifier(mappings=[AWQMapping("re:.*post_attention_layernorm$",
                                                             ["re:.*gate_proj$", "re:.*up_proj$"])]),
                            QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])])
    awq, quant = recipe.modifiers
    assert awq.args["mappings"][0]["balance_layers"] == ("re:.*gate_proj$", "re:.*up_proj$")
    weights = quant.args["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["strategy"], weights["symmetric"]) == (8, "channel", True)


# -- save_pretrained after a run ----------------------------------------------------------------------
def _quant_config(folder: pathlib.Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())["quantization_config"]


def test_save_pretrained_writes_what_output_dir_writes(tmp_path: pathlib.Path) -> None:
    tok = dc.tokenizer()
    model = dc.llama()
    recipe_spec.oneshot(model=model, recipe=_gptq(), dataset=dc.TEXTS, tokenizer=tok, max_seq_length=16,
                        num_calibration_samples=3, output_dir=tmp_path / "out")
    model.save_pretrained(tmp_path / "saved", save_compressed=True)
    model.save_pretrained(str(tmp_path / "again"))  # twice, save_compressed left at its default
    out, saved = tmp_path / "out", tmp_path / "saved"
    assert {p.name for p in out.iterdir()} == {p.name for p in saved.iterdir()}
    assert (out / "recipe.yaml").read_text() == (saved / "recipe.yaml").read_text()
    q = _quant_config(saved)
    assert q == _quant_config(out) == _quant_config(tmp_path / "again")
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    assert q["config_groups"]["group_0"]["weights"]["num_bits"] == 4 and q["ignore"] == ["lm_head"]
    ids = torch.tensor([_ids("the quick brown fox")])
    logits = [transformers.AutoModelForCausalLM.from_pretrained(f)(ids).logits for f in (out, saved)]
    assert torch.equal(logits[0], logits[1])
    assert transformers.AutoTokenizer.from_pretrained(saved)("ab")["input_ids"] == _ids("ab")
    with pytest.raises(ValueError, match="quantization_format='dense'.*not quantized"):
        _wrapped_sparse().save_pretrained(tmp_path / "x", quantization_format="dense")


def _wrapped_sparse() -> Any:
    model = dc.llama()
    recipe_spec.oneshot(model=model, recipe="s_stage:\n  s_modifiers:\n    WandaPruningModifier: "
                        "{sparsity: 0.5, targets: [Linear], ignore: [lm_head]}\n", dataset=dc.TEXTS,
                        tokenizer=dc.tokenizer(), max_seq_length=8, num_calibration_samples=2)
    return model


def test_save_compressed_false_writes_the_dense_format(tmp_path: pathlib.Path) -> None:
    model = dc.llama()
    recipe_spec.oneshot(model=model, recipe=_gptq(), dataset=dc.TEXTS, tokenizer=dc.tokenizer(), max_seq_length=16,
                        num_calibration_samples=3)
    ids = torch.tensor([_ids("the lazy dog")])
    with torch.no_grad():
        before = model(ids).logits
    model.save_pretrained(tmp_path / "dense", save_compressed=False)
    q = _quant_config(tmp_path / "dense")
    assert q["format"] == "dense" and q["config_groups"]["group_0"]["weights"]["num_bits"] == 4
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "dense")
    with torch.no_grad():
        assert torch.equal(back(ids).logits, before)


def test_a_pruned_model_saves_dense_through_save_pretrained(tmp_path: pathlib.Path) -> None:
    model = dc.llama()
    recipe = """sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier: {sparsity: 0.5, mask_structure: "2:4", targets: [Linear], ignore: [lm_head]}
"""
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=dc.TEXTS, tokenizer=dc.tokenizer(), max_seq_length=16,
                        num_calibration_samples=2)
    model.save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "quantization_config" not in config and (tmp_path / "saved" / "recipe.yaml").exists()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    w = back.model.layers[0].mlp.up_proj.weight
    assert float((w == 0).float().mean()) == pytest.approx(0.5)
