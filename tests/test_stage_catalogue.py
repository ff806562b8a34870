"""The stage/group catalogue, version model and argument checker (recipe_spec.stage_dialect)."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from testdata import CORPUS, DATA

from recipe_spec.modifiers import all_specs
from recipe_spec.stage_dialect import Compat, Version, check_modifier, stage_spec, stage_specs
from recipe_spec.stage_dialect.arg_check import KINDS
from recipe_spec.stage_dialect.versions import RELEASES, in_range, summarize, versions_where

LLMC08 = Compat.parse("llmcompressor==0.8")


def kinds(problems: list[Any]) -> list[tuple[tuple[Any, ...], str, str]]:
    return [(p.path, p.kind, p.severity) for p in problems]


# -- versions ------------------------------------------------------------------------------------

def test_versions_compare_as_tuples() -> None:
    assert Version.parse("0.13") > Version.parse("0.9")
    assert in_range(">=0.7,<0.12", Version.parse("0.11"))
    assert not in_range(">=0.7,<0.12", Version.parse("0.12"))
    assert str(RELEASES["llmcompressor"][-1]) == "0.14"
    assert [str(v) for v in RELEASES["sparseml"]] == ["1.6", "1.7", "1.8", "1.9"]


@pytest.mark.parametrize("text,expected", [
    ("sparseml", "sparseml==1.9"), ("sparseml==1.8", "sparseml==1.8"),
    ("llmcompressor", "llmcompressor==0.14"), ("llmcompressor==0.13", "llmcompressor==0.13"),
    ("llm-compressor==0.7.1", "llmcompressor==0.7"),
])
def test_compat_parse(text: str, expected: str) -> None:
    assert str(Compat.parse(text)) == expected


@pytest.mark.parametrize("text,listed", [
    ("torchao", "sparseml"), ("sparseml==2.0", "1.9"), ("llmcompressor==0.99", "0.14"),
    ("llmcompressor==abc", "0.1"),
])
def test_compat_errors_list_choices(text: str, listed: str) -> None:
    with pytest.raises(ValueError, match=listed):
        Compat.parse(text)


def test_summaries() -> None:
    assert summarize(versions_where({"llmcompressor": ">=0.8"})) == "llm-compressor ≥0.8"
    assert summarize(versions_where({"sparseml": ">=1.8", "llmcompressor": "<=0.7"})) == \
        "SparseML ≥1.8, llm-compressor ≤0.7"


# -- catalogue -----------------------------------------------------------------------------------

def test_catalogue_is_separate_and_complete() -> None:
    names = {s.name for s in stage_specs()}
    for n in ("GPTQModifier", "SparseGPTModifier", "WandaPruningModifier", "QuantizationModifier",
              "SmoothQuantModifier", "LogarithmicEqualizationModifier", "AWQModifier",
              "AutoRoundModifier", "SpinQuantModifier", "QuIPModifier", "REAPPruningModifier",
              "ConstantPruningModifier", "MagnitudePruningModifier",
              "LegacyQuantizationModifier", "OutputDistillationModifier"):
        assert n in names
    assert stage_spec("GPTQModifier") is not all_specs().get("GPTQModifier")
    one_shot = [s.name for s in stage_specs() if not s.training]
    assert "GPTQModifier" in one_shot and "ConstantPruningModifier" not in one_shot
    for s in stage_specs():
        assert {"index", "group", "start", "end", "update"} <= set(s.spec.arg_names)
        if s.twin:
            assert s.twin in all_specs() and s.translate is not None


def test_quantization_modifier_changes_meaning() -> None:
    qat = stage_spec("QuantizationModifier", Compat.parse("sparseml==1.7"))
    ct = stage_spec("QuantizationModifier", Compat.parse("sparseml==1.8"))
    assert qat is not None and ct is not None
    assert qat.training and "scheme_overrides" in qat.spec.arg_names
    assert not ct.training and "config_groups" in ct.spec.arg_names


def test_translations() -> None:
    spec = stage_spec("ConstantPruningModifier")
    assert spec is not None and spec.translate is not None
    t = spec.translate({"targets": ["re:.*q_proj.weight"], "start": 0}, None)
    assert t.ok and t.args == {"params": ["re:.*q_proj.weight"], "start_epoch": 0}
    refused = spec.translate({"targets": ["model.layers.0"], "start": 0}, None)
    assert not refused.ok
    mag = stage_spec("MagnitudePruningModifier")
    assert mag is not None and mag.translate is not None
    args = {"targets": "__ALL_PRUNABLE__", "init_sparsity": 0.0, "final_sparsity": 0.5,
            "start": 0, "end": 5, "update": 1}
    assert mag.translate(args, Compat.parse("llmcompressor==0.5")).args["leave_enabled"] is False
    assert not mag.translate({**args, "apply_globally": True}, None).ok
    dist = stage_spec("OutputDistillationModifier")
    assert dist is not None and dist.translate is not None
    assert not dist.translate({"targets": ["re:.*layers.0$"]}, None).ok


# -- drifts ----------------------------------------------------------------------------------------

def test_gptq_sequential_update() -> None:
    args = {"sequential_update": True, "scheme": "W4A16"}
    assert kinds(check_modifier("GPTQModifier", args, Compat.parse("llmcompressor==0.7"))) == []
    assert kinds(check_modifier("GPTQModifier", args, LLMC08)) == \
        [(("sequential_update",), "removed_arg", "error")]
    (p,) = [p for p in check_modifier("GPTQModifier", args, None) if p.path]
    assert (p.kind, p.severity, p.versions) == ("removed_arg", "warning", "llm-compressor ≥0.8")


def test_gptq_sequential_targets_removed_in_0_11() -> None:
    args = {"sequential_targets": ["LlamaDecoderLayer"], "scheme": "W4A16"}
    assert check_modifier("GPTQModifier", args, Compat.parse("llmcompressor==0.10")) == []
    assert kinds(check_modifier("GPTQModifier", args, Compat.parse("llmcompressor==0.12"))) == \
        [(("sequential_targets",), "removed_arg", "error")]
    assert kinds(check_modifier("GPTQModifier", args, Compat.parse("llmcompressor==0.11"))) == \
        [(("sequential_targets",), "removed_arg", "error")]


def test_awq_became_a_transform() -> None:
    args = {"scheme": "W4A16", "targets": ["Linear"], "ignore": ["lm_head"]}
    assert check_modifier("AWQModifier", args, Compat.parse("llmcompressor==0.10")) == []
    found = check_modifier("AWQModifier", args, Compat.parse("llmcompressor"))
    assert [p.path[0] for p in found] == ["scheme", "targets", "ignore"]
    assert all(p.kind == "removed_arg" and "QuantizationModifier" in p.hint for p in found)
    assert check_modifier("AWQModifier", {"duo_scaling": "both"}, Compat.parse("llmcompressor")) == []


def test_sparseml_18_quantization_requires_config_groups() -> None:
    found = check_modifier("QuantizationModifier", {"ignore": ["lm_head"]},
                           Compat.parse("sparseml==1.8"))
    assert kinds(found) == [((), "missing_required", "error")]
    assert "config_groups" in found[0].message
    assert check_modifier("QuantizationModifier", {"scheme": "W8A8"}, Compat.parse("llmcompressor")) == []


def test_smoothquant_mappings_required_in_sparseml() -> None:
    args = {"smoothing_strength": 0.8}
    assert kinds(check_modifier("SmoothQuantModifier", args, Compat.parse("sparseml==1.8"))) == \
        [((), "missing_required", "error")]
    assert check_modifier("SmoothQuantModifier", args, Compat.parse("llmcompressor")) == []


@pytest.mark.parametrize("args", [{}, None])
def test_empty_or_null_args(args: Any) -> None:
    found = check_modifier("ConstantPruningModifier", args, None)
    assert kinds(found) == [((), "null_args", "error")]
    assert kinds(check_modifier("ConstantPruningModifier", args, Compat.parse("sparseml==1.8"))) \
        == [((), "null_args", "error")]


def test_unknown_arg_with_hint() -> None:
    (p,) = [p for p in check_modifier("QuantizationModifier", {"dampen": 0.1}, None) if p.path]
    assert (p.path, p.kind, p.severity) == (("dampen",), "unknown_arg", "error")
    assert "dampening_frac" in p.hint and "GPTQModifier" in p.hint
    (p,) = check_modifier("GPTQModifier", {"blok_size": 64}, LLMC08)
    assert (p.kind, p.hint) == ("unknown_arg", "did you mean block_size?")


def test_group_placed_under_gptq() -> None:
    args = {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4}}}
    (p,) = check_modifier("GPTQModifier", args, LLMC08)
    assert (p.path, p.kind, p.severity) == (("group_0",), "misplaced", "error")
    assert p.hint == "move it under config_groups:"


def test_bad_preset() -> None:
    (p,) = check_modifier("QuantizationModifier", {"scheme": "W4A61"}, LLMC08)
    assert (p.path, p.kind, p.hint) == (("scheme",), "preset", "did you mean W4A16?")
    (p,) = check_modifier("QuantizationModifier", {"scheme": {"FP8_DYNAMC": ["Linear"]}}, LLMC08)
    assert (p.path, p.kind, p.hint) == (("scheme", "FP8_DYNAMC"), "preset",
                                        "did you mean FP8_DYNAMIC?")
    (p,) = check_modifier("QuantizationModifier", {"scheme": "NVFP4"}, Compat.parse("llmcompressor==0.5"))
    assert p.kind == "preset"
    assert check_modifier("QuantizationModifier", {"scheme": "nvfp4"}, LLMC08) == []


def _groups(weights: Mapping[str, Any]) -> dict[str, Any]:
    return {"config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(weights)}}}


def test_bad_strategy_enum() -> None:
    (p,) = check_modifier("GPTQModifier", _groups({"num_bits": 4, "strategy": "grop"}), LLMC08)
    assert (p.path, p.kind, p.severity) == \
        (("config_groups", "group_0", "weights", "strategy"), "enum", "error")
    assert "'group'" in p.hint


def test_num_bits_type_with_path() -> None:
    found = check_modifier("QuantizationModifier", _groups({"num_bits": "four"}), None)
    (p,) = [p for p in found if p.severity == "error"]
    assert (p.path, p.kind, p.severity) == \
        (("config_groups", "group_0", "weights", "num_bits"), "type", "error")
    assert check_modifier("QuantizationModifier", _groups({"num_bits": "eval(2*2)"}), LLMC08) == []


def test_other_kinds() -> None:
    (p,) = check_modifier("sparseml.modifiers.obcq.SparseGPTModifier", {"sparsity": 0.5}, None)
    assert (p.kind, p.hint) == ("dotted_name", "write SparseGPTModifier")
    (p,) = check_modifier("SparseGPTModifer", {"sparsity": 0.5}, None)
    assert (p.kind, p.hint) == ("unknown_modifier", "did you mean SparseGPTModifier?")
    (p,) = check_modifier("SparseGPTModifier", {"sparsity": 0.5, "sequential_update": False},
                          Compat.parse("llmcompressor"))
    assert (p.kind, p.severity) == ("deprecated", "warning")
    (p,) = check_modifier("AWQModifier", {}, Compat.parse("sparseml==1.8"))
    assert p.kind == "not_in_version"
    (p,) = check_modifier("SmoothQuantModifier", {"mappings": [], "smoothing_strength": 0.5},
                          Compat.parse("sparseml==1.7"))
    assert (p.kind, p.hint) == ("renamed_arg", "write alpha")
    assert {p.kind for p in check_modifier("GPTQModifier", {"num_bits": 4}, LLMC08)} == {"misplaced"}
    for name in ("QuantizationModifier", "GPTQModifier"):
        for p in check_modifier(name, {"x": 1, "scheme": "W9"}, None):
            assert p.kind in KINDS


# -- corpus ------------------------------------------------------------------------------------

INDEX = CORPUS / "INDEX.tsv"


def _modifiers(recipe: Any) -> Iterator[tuple[str, Any]]:
    """{Name: args} of every group: `*_stage` -> `*_modifiers`, top-level `*_modifiers`, and
    `stages:` -> name -> `*_modifiers`."""
    if not isinstance(recipe, dict):
        return
    for key, value in recipe.items():
        if not isinstance(key, str) or not isinstance(value, dict):
            continue
        if key.endswith("_stage") or key == "stages":
            stages = value.values() if key == "stages" else [value]
            for stage in stages:
                if isinstance(stage, dict):
                    for gkey, group in stage.items():
                        if isinstance(gkey, str) and gkey.endswith("_modifiers") \
                                and isinstance(group, dict):
                            yield from group.items()
        elif key.endswith("_modifiers"):
            yield from value.items()


# Every error the checker reports on the corpus, by file, each a genuine defect:
# - SparseGPTModifier/GPTQModifier renamed_arg: `percdamp` (renamed `dampening_frac` before any
#   release), `prunen`/`prunem` (replaced by `mask_structure: "N:M"` in sparseml #1802, before
#   1.6) and `compress_layers` (renamed `targets` in #1775): no release reads these names, so
#   the setting silently has no effect (SparseML) or is rejected (llm-compressor >= 0.7).
# - vLLMQuantizationModifier not_in_version: a development class name (sparseml #2246, renamed
#   QuantizationModifier in #2307 before 1.8); no release registers it, so the recipe fails
#   with "No modifier of type ... found".
# - ConstantPruningModifier `leave_enabled`, MagnitudePruningModifier `update_frequency`
#   (stage/group name: `update`): not arguments of the class in any release, silently ignored.
# - WandaPruningModifier with `init_sparsity`/`final_sparsity`/`update_frequency`/
#   `leave_enabled`: gradual-pruning arguments Wanda never had; its `sparsity` stays at the
#   default 0.0, so the recipe prunes nothing.
# - SparseGPTModifier with a nested `GPTQModifier:` key inside its arguments (misplaced): the
#   GPTQ modifier is never created.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    'branches/sparseml@pr1724__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1724__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1728__tests__sparseml__core___test_recipe_mobilenet_v2.yaml': [('MagnitudePruningModifier', 'renamed_arg')],
    'branches/sparseml@pr1737__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1737__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1750__recipe.yaml': [('ConstantPruningModifier', 'unknown_arg')],
    'branches/sparseml@pr1752__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1758__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1758__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1758__tests__sparseml__transformers__obcq__test_tiny.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1760__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1760__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1778__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1783__tests__sparseml__transformers__obcq__test_tiny_w_head.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr1794__local__wanda__wanda_recipe.yaml': [('WandaPruningModifier', 'unknown_arg')],
    'branches/sparseml@pr2046__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2046__src__sparseml__transformers__sparsification__obcq__example_mistral.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2046__tests__sparseml__transformers__obcq__test_tiny.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__compression__recipes__new_quant_full.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__compression__recipes__new_quant_weight.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__finetune__test_alternate_recipe.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__obcq__additional_sparsity.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__obcq__quant.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__obcq__quant_and_sparse.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__obcq__recipes__sparse.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2079__tests__sparseml__transformers__obcq__recipes__test_tiny2.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2262__tests__sparseml__transformers__obcq__recipes__quant.yaml': [('GPTQModifier', 'renamed_arg')],
    'branches/sparseml@pr2262__tests__sparseml__transformers__obcq__recipes__quant_and_sparse.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2262__tests__sparseml__transformers__obcq__recipes__sparse.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__compression__recipes__new_quant_full.yaml': [('GPTQModifier', 'renamed_arg'), ('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__compression__recipes__new_quant_weight.yaml': [('GPTQModifier', 'renamed_arg'), ('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__compression__recipes__old_quant_full.yaml': [('GPTQModifier', 'renamed_arg')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__compression__recipes__old_quant_weight.yaml': [('GPTQModifier', 'renamed_arg')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__obcq__recipes__additional_sparsity_with_quant.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__obcq__recipes__quant.yaml': [('SparseGPTModifier', 'misplaced'), ('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2263__tests__sparseml__transformers__obcq__recipes__quant_and_sparse.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2271__examples__llama7b_sparse_quantized__2-4_w4a16_recipe.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2271__tests__sparseml__transformers__obcq__recipes__quant.yaml': [('GPTQModifier', 'renamed_arg')],
    'branches/sparseml@pr2271__tests__sparseml__transformers__obcq__recipes__quant_and_sparse.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2278__tests__sparseml__transformers__obcq__recipes__quant.yaml': [('GPTQModifier', 'renamed_arg')],
    'branches/sparseml@pr2278__tests__sparseml__transformers__obcq__recipes__quant_and_sparse.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'branches/sparseml@pr2283__tests__sparseml__transformers__compression__recipes__new_quant_channel.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2283__tests__sparseml__transformers__compression__recipes__new_quant_full.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2283__tests__sparseml__transformers__compression__recipes__new_quant_weight.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'branches/sparseml@pr2298__examples__llama7b_sparse_quantized__2-4_w4a16_recipe-group.yaml': [('vLLMQuantizationModifier', 'not_in_version')],
    'history/sparseml@v1.6.0__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.6.0__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.6.0__tests__sparseml__transformers__obcq__test_tiny.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.6.0__tests__sparseml__transformers__obcq__test_tiny2.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.7.0__src__sparseml__transformers__sparsification__obcq__example.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.7.0__src__sparseml__transformers__sparsification__obcq__example_mistral.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'history/sparseml@v1.7.0__tests__sparseml__transformers__finetune__test_alternate_recipe.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__integrations__huggingface-transformers__tutorials__text-generation__example_alternating_recipe.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__integrations__torchvision__modifiers_refactor_example__e2e_recipe.yaml': [('MagnitudePruningModifier', 'renamed_arg')],
    'sparseml__src__sparseml__transformers__finetune__example_alternating_recipe.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__src__sparseml__transformers__sparsification__obcq__example.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'sparseml__src__sparseml__transformers__sparsification__obcq__example_llama.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'sparseml__src__sparseml__transformers__sparsification__obcq__example_mistral.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__finetune__test_alternate_recipe.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__additional_sparsity.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__additional_sparsity_with_quant.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__quant.yaml': [('GPTQModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__quant_and_sparse.yaml': [('GPTQModifier', 'renamed_arg'), ('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__sparse.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__sparse_with_mask_structure.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__recipes__test_tiny2.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__test_additional_sparsity.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__test_tiny.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__test_tiny2.yaml': [('SparseGPTModifier', 'renamed_arg')],
    'sparseml__tests__sparseml__transformers__obcq__test_tiny_w_head.yaml': [('SparseGPTModifier', 'renamed_arg')],
}


def test_corpus_core_recipes() -> None:
    with INDEX.open() as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["format"].startswith("core")]
    assert len(rows) == 95
    found: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        recipe = yaml.safe_load((DATA / row["stored_at"].split("/", 1)[1]).read_text())
        for name, args in _modifiers(recipe):
            for p in check_modifier(name, args, None):
                assert p.kind != "unknown_modifier", (row["file"], name)
                if p.severity == "error":
                    print(f"{row['file']}: {name} {'.'.join(map(str, p.path))}: {p.kind}: "
                          f"{p.message} [{p.hint}]")
                    found.setdefault(row["file"], set()).add((name, p.kind))
    assert found == {f: set(v) for f, v in EXPECTED.items()}
