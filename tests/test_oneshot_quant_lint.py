"""``recipe-spec lint RECIPE --model DIR`` for GPTQModifier / QuantizationModifier / AutoRoundModifier recipes, from
the checkpoint's headers: group sizes that do not divide a target's ``in_features`` (P012)
against llm-compressor 0.14's own refusals (conformance case 12: the layers its
``group_size_validation`` named, the observer's ``unflatten`` error), a case it ran (case 10:
W4A16 on hidden 128), and the GPTQ Hessian memory estimate."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from testdata import LLMCOMPRESSOR

from recipe_spec import load
from recipe_spec.cli import main
from recipe_spec.oneshot.checkpoint import read_model
from recipe_spec.oneshot.estimate import estimate
from recipe_spec.oneshot.quant_lint import gptq_modifiers, quant_findings, weight_groups

CASES = LLMCOMPRESSOR


def _case(name: str) -> dict:
    return json.loads((CASES / name / "case.json").read_text())


def _checkpoint(name: str, folder: Path) -> Path:
    """The case's config.json and initial.safetensors as a checkpoint folder."""
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(_case(name)["model_config"], architectures=["LlamaForCausalLM"])
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(CASES / name / "initial.safetensors", folder / "model.safetensors")
    return folder


def _sub_case(sub: str) -> dict:
    return next(s for s in _case("12_error_cases")["sub_cases"] if s["sub_case"] == sub)


def _columns(name: str) -> dict[str, int]:
    """Each decoder-layer Linear's in_features, read from the case's tensors."""
    from safetensors.numpy import load_file

    return {k.removesuffix(".weight"): v.shape[1] for k, v in load_file(str(CASES / name / "initial.safetensors")).items()
            if k.endswith("proj.weight")}


def _lint(recipe_text: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict]]:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_text)
    code = main(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor==0.14",
                 "--format", "json", "--num-samples", "16", "--seq-len", "32"])
    found = json.loads(capsys.readouterr().out)["files"][0]["diagnostics"]
    return code, [d for d in found if d["code"] == "P012"]


def _named(message: str) -> set[str]:
    return set(re.findall(r"(model\.layers\.\d+\.\w+\.\w+) \(in \d+\)", message))


def test_group_size_48_names_the_layers_llm_compressor_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sub = _sub_case("group_size_48_indivisible")
    refused = set(re.findall(r"- (\S+) \(columns=\d+, group_size=48\)", sub["error"]["message"]))
    assert len(refused) == 14
    code, (d,) = _lint(sub["recipe_yaml"], _checkpoint("12_error_cases", tmp_path / "m"), tmp_path, capsys)
    assert code == 1 and (d["line"], d["column"]) == (8, 91)  # the group_size value
    assert "groups of 48" in d["message"] and "and 11 more" in d["message"]
    folder = tmp_path / "m"
    model = read_model(folder)
    (diag,) = quant_findings(load(sub["recipe_yaml"]), model.modules)
    assert diag.code == "P012"
    bad = {n for n, c in _columns("12_error_cases").items() if c % 48}
    assert bad == refused
    assert "group_size 32" in d["hint"]  # the largest size up to 48 dividing 64 and 128


def test_w4a16_on_64_columns_is_refused_before_the_observer_fails(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    sub = _sub_case("group_size_not_dividing_in_features")
    assert "unflatten" in sub["error"]["message"] and "(64)" in sub["error"]["message"]
    code, (d,) = _lint(sub["recipe_yaml"], _checkpoint("12_error_cases", tmp_path / "m"), tmp_path, capsys)
    assert code == 1 and (d["line"], d["column"]) == (4, 15)  # the scheme value
    assert "groups of 128" in d["message"] and "unflatten" in d["message"]
    assert "model.layers.0.mlp.down_proj" not in d["message"]  # 128 columns: a whole group
    assert "group_size 64" in d["hint"] and "ignore:" in d["hint"]
    expected = {n for n, c in _columns("12_error_cases").items() if c % 128}
    assert len(expected) == 12 and _named(d["message"]) <= expected


def test_autoround_s_groups_are_checked_as_the_other_quantizers(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """AutoRoundModifier initialises its scheme as QuantizationModifier does (llm-compressor's
    ``QuantizationMixin``, the same group-size validation): W4A16 on case 12's 64-column
    layers is named, located at the scheme; MXFP4's groups of 32 divide every layer."""
    folder = _checkpoint("12_error_cases", tmp_path / "m")
    recipe = ("quant_stage:\n  quant_modifiers:\n    AutoRoundModifier:\n      iters: 10\n      scheme: {}\n"
              "      targets: [Linear]\n      ignore: [lm_head]\n")
    code, (d,) = _lint(recipe.format("W4A16"), folder, tmp_path, capsys)
    assert code == 1 and (d["line"], d["column"]) == (5, 15) and "AutoRoundModifier" in d["message"]
    assert _named(d["message"]) <= {n for n, c in _columns("12_error_cases").items() if c % 128}
    assert _lint(recipe.format("MXFP4"), folder, tmp_path, capsys) == (0, [])


def test_the_hint_s_group_size_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sub = _sub_case("group_size_48_indivisible")
    fixed = sub["recipe_yaml"].replace("group_size: 48", "group_size: 32")
    code, found = _lint(fixed, _checkpoint("12_error_cases", tmp_path / "m"), tmp_path, capsys)
    assert (code, found) == (0, [])


def test_w4a16_on_hidden_128_runs_as_in_llm_compressor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Case 10 ran GPTQ W4A16 on hidden 128 / intermediate 256: nothing to report."""
    recipe = _case("10_staged_sparse24_gptq_w4a16")["recipe_yaml"]
    assert _case("10_staged_sparse24_gptq_w4a16")["error"] is None
    code, found = _lint(recipe, _checkpoint("10_staged_sparse24_gptq_w4a16", tmp_path / "m"), tmp_path, capsys)
    assert (code, found) == (0, [])


@pytest.mark.parametrize(("body", "flagged"), [
    ("      scheme: W8A8\n      ignore: [lm_head]\n", 0),  # per channel: no groups
    ("      scheme: {W4A16: ['re:.*down_proj$']}\n", 0),  # 128 columns only
    ("      scheme: {W4A16: ['re:.*q_proj$']}\n", 2),
    ("      scheme: NVFP4A16\n      ignore: [lm_head]\n", 0),  # groups of 16 divide 64 and 128
    ("      config_groups:\n        g:\n          targets: [Linear]\n"
     "          weights: {num_bits: 4, strategy: group, group_size: 96}\n      ignore: [lm_head]\n", 14),
    ("      scheme: W4A16\n      ignore: [lm_head, 're:.*self_attn.*', 're:.*gate_proj$', 're:.*up_proj$']\n", 0),
])
def test_which_layers_each_scheme_form_flags(body: str, flagged: int, tmp_path: Path) -> None:
    recipe = load("quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n" + body)
    model = read_model(_checkpoint("12_error_cases", tmp_path / "m"))
    found = quant_findings(recipe, model.modules)
    columns = _columns("12_error_cases")
    count = sum(len(_named(d.message)) + int(m.group(1)) if (m := re.search(r"and (\d+) more", d.message)) else
                len(_named(d.message)) for d in found)
    assert count == flagged, [d.message for d in found]
    assert all(columns[n] % int(re.search(r"groups of (\d+)", d.message).group(1)) for d in found
               for n in _named(d.message))


def test_groups_read_from_presets_and_config_groups() -> None:
    r = load("q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      config_groups:\n"
             "        a: {targets: [Linear], weights: {num_bits: 4, group_size: 64}}\n"
             "        b: {targets: ['re:.*down'], weights: {num_bits: 8, strategy: channel}}\n")
    groups = weight_groups(r.modifiers[0])
    assert [(g.label, g.group_size, g.targets) for g in groups] == [
        ("config_groups.a", 64, ("Linear",)), ("config_groups.b", None, ("re:.*down",))]


def test_gptq_memory_estimate_is_sparsegpts_hessian(tmp_path: Path) -> None:
    recipe = load(_sub_case("group_size_not_dividing_in_features")["recipe_yaml"])
    model = read_model(_checkpoint("12_error_cases", tmp_path / "m"))
    (cost,) = estimate(gptq_modifiers(recipe), model, 16, 32).costs
    columns = _columns("12_error_cases")
    assert cost.targets == 14 and cost.pipeline == "sequential"
    assert cost.largest == ("model.layers.0.mlp.down_proj", 128 * 128 * 4)
    assert cost.block_bytes == sum(c * c * 4 for n, c in columns.items() if n.startswith("model.layers.0."))
    assert cost.statistic_flops == sum(2.0 * 16 * 32 * c * c for n, c in columns.items()
                                       if n.startswith("model.layers.0."))


def _p006(recipe_text: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    recipe = tmp_path / "s.yaml"
    recipe.write_text(recipe_text)
    main(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor==0.14", "--format", "json",
          "--num-samples", "16", "--seq-len", "32"])
    return [d for d in json.loads(capsys.readouterr().out)["files"][0]["diagnostics"] if d["code"] == "P006"]


def test_a_smoothing_mapping_that_resolves_to_no_layer_is_named(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A SmoothQuant mapping whose balance pattern matches no layer of the checkpoint (a typo:
    `gate_projj`) is one P006 at that entry; the entry that resolves, and Llama's default
    mappings, give none."""
    folder = _checkpoint("06_gptq_int8_channel_explicit", tmp_path / "ckpt")
    head = "smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n      smoothing_strength: 0.8\n"
    mappings = ("      mappings:\n"
                "        - [['re:.*q_proj', 're:.*k_proj', 're:.*v_proj'], 're:.*input_layernorm']\n"
                "        - [['re:.*gate_projj', 're:.*up_proj'], 're:.*post_attention_layernorm']\n")
    (found,) = _p006(head + mappings, folder, tmp_path, capsys)
    assert found["line"] == 7 and "mappings[1]" in found["message"] and "re:.*gate_projj" in found["message"]
    assert "re:.*up_proj" not in found["message"].split("this model:")[1]
    assert _p006(head, folder, tmp_path, capsys) == []


@pytest.mark.parametrize("body, named", [
    # case 08: hidden 64, intermediate 128: every width a power of two
    ("QuIPModifier:\n      transform_type: hadamard\n", set()),
    # blocks of 48 divide no width of it
    ("QuIPModifier:\n      transform_type: random-matrix\n      transform_block_size: 48\n", {"down_proj", "more"}),
    ("SpinQuantModifier:\n      rotations: [R1, R4]\n      transform_block_size: 48\n", {"R1", "R4", "down_proj"}),
])
def test_a_rotation_that_does_not_fit_a_layer_is_named(body: str, named: set[str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """P014 from the headers alone: a block size that does not divide a rotated width (each
    rotation group once, its layers named), none where every width takes it."""
    folder = _checkpoint("08_rtn_fp8_dynamic", tmp_path / "model")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"q_stage:\n  q_modifiers:\n    {body}")
    main(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor==0.14", "--format", "json"])
    found = [d for d in json.loads(capsys.readouterr().out)["files"][0]["diagnostics"] if d["code"] == "P014"]
    text = " ".join(d["message"] for d in found)
    assert all(n in text for n in named) and bool(found) == bool(named), found
    assert all(d["line"] == 3 for d in found)
