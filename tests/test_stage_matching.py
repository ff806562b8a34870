"""targets/ignore matched as SparseML and llm-compressor match them, against checkpoint names."""

from __future__ import annotations

import json
import re
import struct

import pytest

from recipe_spec.params.checkpoint import read_checkpoint
from recipe_spec.stage_dialect.matching import kind_for_modifier, match, parse_version, semantics

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("llama")
    cfg = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, vocab_size=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(d, safe_serialization=True)
    return model, read_checkpoint(d), read_checkpoint(d, classes=False)


@pytest.fixture(scope="module")
def multimodal(tmp_path_factory: pytest.TempPathFactory):
    """A Gemma3-like layout written by hand (#1428): the head is `language_model.lm_head`."""
    d = tmp_path_factory.mktemp("mm")
    (d / "config.json").write_text(json.dumps({"model_type": "not-a-real-model"}))
    names = ["language_model.model.layers.0.self_attn.q_proj.weight",
             "language_model.model.layers.0.mlp.gate_proj.weight",
             "language_model.model.layers.0.mlp.gate.weight",
             "language_model.lm_head.weight",
             "vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight"]
    header = {n: {"dtype": "F32", "shape": [2, 2], "data_offsets": [16 * i, 16 * i + 16]}
              for i, n in enumerate(names)}
    raw = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16 * len(names))
    return read_checkpoint(d)


# ----------------------------------------------------------------- an independent reference


def reference_llmc(model, targets: list[str], ignore: list[str]) -> list[str]:
    """compressed-tensors match_named_modules, written out on the live tiny model."""
    def hit(name: str, module, pats: list[str]) -> bool:
        return any((re.match(t[3:], name) is not None) if t.startswith("re:") else
                   (t == name or any(c.__name__ == t for c in type(module).__mro__)) for t in pats)
    return [n for n, mod in model.named_modules() if hit(n, mod, targets) and not hit(n, mod, ignore)]


def reference_sparseml_layers(model, targets: list[str]) -> list[str]:
    """SparseML 1.8 match_layers_params(params=False), written out on the live tiny model."""
    def name_hit(value: str) -> bool:
        return any((re.match(t[3:], value) is not None) if t.startswith("re:") else t == value for t in targets)
    out = []
    for n, mod in model.named_modules():
        own = [f"{n}.{p}" for p, _ in mod.named_parameters(recurse=False)]
        if name_hit(n) or type(mod).__name__ in targets or any(name_hit(f) for f in own):
            out.append(n)
    return out


@pytest.mark.parametrize("targets", [["Linear"], ["re:.*q_proj$", "LlamaDecoderLayer"], ["re:model.layers.1"]])
def test_llmcompressor_matches_the_reference(llama, targets: list[str]) -> None:
    model, names, _ = llama
    result = match("llmcompressor", None, targets, ["lm_head"], names)
    expected = reference_llmc(model, targets, ["lm_head"])
    assert expected and sorted(result.selected) == sorted(expected)


@pytest.mark.parametrize("targets", [["re:.*q_proj.weight"], ["re:.*mlp", "LlamaRMSNorm"]])
def test_sparseml_matches_the_reference(llama, targets: list[str]) -> None:
    model, names, _ = llama
    result = match("sparseml", "1.8", targets, None, names, kind="layers")
    expected = reference_sparseml_layers(model, targets)
    assert expected and sorted(result.selected) == sorted(expected)


# ----------------------------------------------------------------- #1428


def test_lm_head_vs_language_model_lm_head(multimodal) -> None:
    result = match("llmcompressor", "0.13", ["Linear"], ["lm_head"], multimodal)
    (ign,) = result.ignore
    assert ign.matched_nothing and ign.closest[0] == "language_model.lm_head"
    fixed = match("llmcompressor", "0.13", ["re:.*proj$"], ["re:.*lm_head"], multimodal)
    assert fixed.ignore[0].matched == ("language_model.lm_head",)
    assert multimodal.classes is None and "not-a-real-model" in multimodal.classes_note
    assert result.unchecked_class_targets == ("Linear",) and not result.targets[0].matched_nothing


def test_regex_pitfalls(multimodal) -> None:
    r = match("llmcompressor", None, ["re:.*mlp.gate"], ["re:lm_head", r"language_model\.lm_head"], multimodal)
    (t,) = r.targets
    assert set(t.matched) == {"language_model.model.layers.0.mlp.gate", "language_model.model.layers.0.mlp.gate_proj"}
    assert any("unescaped" in n for n in t.notes) and any("no `$`" in n for n in t.notes)
    anchored, no_prefix = r.ignore
    assert anchored.matched_nothing and any("re:.*lm_head" in n for n in anchored.notes)
    assert no_prefix.matched_nothing and any("no `re:` prefix" in n for n in no_prefix.notes)
    bad = match("llmcompressor", None, ["re:(unclosed"], None, multimodal)
    assert bad.targets[0].error and "not a valid regular expression" in bad.targets[0].error


# ----------------------------------------------------------------- parameter-name targets


@pytest.mark.parametrize(
    ("tool", "version", "matches"),
    [("sparseml", "1.8", True), ("sparseml", "1.6", True), ("llmcompressor", "0.10", True),
     ("llmcompressor", "0.11", False), ("llmcompressor", None, False)],
)
def test_parameter_name_targets(llama, tool: str, version: str | None, matches: bool) -> None:
    _, names, _ = llama
    r = match(tool, version, ["re:.*q_proj.weight"], None, names, kind=kind_for_modifier("ConstantPruningModifier"))
    (t,) = r.targets
    if matches:
        assert t.matched == ("model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj")
        assert t.parameters_matched[0] == "model.layers.0.self_attn.q_proj.weight"
        assert not t.parameter_names_only and not t.strict_missing
    else:
        assert t.matched == () and t.parameter_names_only
        assert any("matches parameter names" in n and "does not match" in n for n in t.notes)


def test_sparseml_pruning_needs_parameter_or_class_names(llama) -> None:
    _, names, _ = llama
    r = match("sparseml", "1.9", ["lm_head", "re:.*k_proj$"], None, names, kind="pruning")
    assert all(t.matched == () and t.strict_missing for t in r.targets)
    new = match("llmcompressor", "0.13", ["lm_head", "re:model.layers.0$"], None, names, kind="pruning")
    assert new.targets[0].matched == ("lm_head",) and not new.semantics.strict
    assert new.targets[1].matched == () and any("direct `weight`" in n for n in new.targets[1].notes)


def test_sparseml_credits_the_first_target_only(llama) -> None:
    _, names, _ = llama
    r = match("sparseml", "1.8", ["re:.*", "lm_head"], None, names, kind="layers")
    first, second = r.targets
    assert second.matched == ("lm_head",) and second.strict_missing and not first.strict_missing


def test_class_names_exact_vs_mro(llama) -> None:
    _, names, without = llama
    old = match("sparseml", "1.8", ["PreTrainedModel"], None, names, kind="layers")
    assert old.targets[0].matched == () and any("base class" in n for n in old.targets[0].notes)
    new = match("llmcompressor", None, ["PreTrainedModel"], None, names)
    assert new.targets[0].matched == ("", "model")  # LlamaForCausalLM and LlamaModel
    typo = match("llmcompressor", None, ["LlamaDecoderlayer"], None, names)
    assert "LlamaDecoderLayer" in typo.targets[0].closest
    unknown = match("llmcompressor", None, ["Linear"], None, without)
    assert unknown.targets[0].class_unchecked and not unknown.targets[0].matched_nothing
    assert "could not be checked" in unknown.classes_note


# ----------------------------------------------------------------- ignore and special tokens


@pytest.mark.parametrize("with_classes", [True, False])
def test_ignore_everything(llama, with_classes: bool) -> None:
    _, names, without = llama
    r = match("llmcompressor", None, ["Linear"], ["re:.*"], names if with_classes else without)
    assert r.ignores_everything and r.selected == ()
    partial = match("llmcompressor", None, ["Linear"], ["lm_head"], names)
    assert not partial.ignores_everything and "lm_head" not in partial.selected
    assert len(partial.selected) == 14


def test_special_tokens(llama) -> None:
    _, names, _ = llama
    whole = match("sparseml", "1.8", "__ALL_PRUNABLE__", None, names, kind="pruning")
    assert len(whole.targets[0].matched) == 15
    listed = match("sparseml", "1.8", ["__ALL_PRUNABLE__"], None, names, kind="pruning")
    assert listed.targets[0].matched == () and listed.targets[0].strict_missing
    assert any("whole `targets` string" in n for n in listed.targets[0].notes)
    new = match("llmcompressor", "0.13", ["__ALL_PRUNABLE__"], None, names, kind="pruning")
    assert len(new.targets[0].matched) == 15 and "deprecated" in new.targets[0].notes[0]
    gone = match("llmcompressor", "0.13", ["__ALL__"], None, names, kind="pruning")
    assert gone.targets[0].error and "__ALL__" in gone.targets[0].error


def test_versions_and_semantics() -> None:
    assert parse_version("0.10.0.3") == (0, 10, 0, 3) and parse_version((0, 13)) == (0, 13)
    assert parse_version(None) is None
    assert semantics("llmcompressor", "0.10", "pruning").parameter_names
    assert not semantics("llmcompressor", "0.11", "pruning").parameter_names
    assert not semantics("llmcompressor", "0.7", "quantization").class_mro
    assert semantics("llmcompressor", "0.8", "quantization").class_mro
    assert semantics("sparseml", "1.8", "layers").strict
    with pytest.raises(ValueError, match="tool"):
        semantics("torchao", None, "pruning")
    assert kind_for_modifier("SparseGPTModifier") == "layers"
    assert kind_for_modifier("GPTQModifier") == "quantization"
