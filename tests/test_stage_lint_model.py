"""``recipe-spec lint RECIPE --model DIR`` for stage/group recipes: targets and ignores against
a tiny Llama checkpoint written here with transformers (nothing downloaded), matched as each
tool matches them; names come from the safetensors headers only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_checkpoint_names import _llama, write_safetensors  # noqa: E402

RECIPE = """\
quant_stage:
  quant_modifiers:
    GPTQModifier:
      scheme: W4A16
      targets: [Linear]
      ignore: [lm_head, language_model.lm_head]
finetuning_stage:
  finetuning_modifiers:
    ConstantPruningModifier:
      targets: ['re:.*q_proj.weight', 're:.*q_proj$']
      start: 0
"""


def lint(recipe: Path, model: Path, *extra: str) -> tuple[int, list[tuple[str, str, int, int, str, str]]]:
    out = subprocess.run([sys.executable, "-m", "recipe_spec", "lint", str(recipe), "--model", str(model),
                          "--format", "json", *extra], capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    found = json.loads(out.stdout)["files"][0]["diagnostics"]
    return out.returncode, [(d["code"], d["severity"], d["line"], d["column"], d["message"], d.get("hint", ""))
                            for d in found if d["code"] in ("P001", "P007")]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama")
    _llama(path)
    return path


def test_lm_head_and_parameter_names_by_tool(llama: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    _, both = lint(recipe, llama)
    where = {(c, s, line, col) for c, s, line, col, _, _ in both}
    assert ("P001", "warning", 6, 25) in where  # language_model.lm_head: nothing to ignore here
    assert not any(line == 6 and col == 16 for _, _, line, col, _, _ in both)  # lm_head exists
    # a parameter-name target: SparseML matches it, llm-compressor (0.11+) does not
    param = [d for d in both if d[2:4] == (10, 17)]
    assert [d[:2] for d in param] == [("P001", "warning")] and "llm-compressor" in param[0][4]
    assert "q_proj$" in param[0][5]
    _, old = lint(recipe, llama, "--compat", "sparseml==1.8")
    assert not [d for d in old if d[2:4] == (10, 17)]
    # SparseML pruning matches parameters, not modules: the module pattern is the one missing
    assert [d[:4] for d in old if d[2] == 10] == [("P001", "error", 10, 39)]
    code, new = lint(recipe, llama, "--compat", "llmcompressor")
    assert [d[:4] for d in new if d[2] == 10] == [("P001", "error", 10, 17)] and code == 1


def test_multimodal_lm_head_is_found_by_closest_names(tmp_path: Path) -> None:
    """llm-compressor #1428: plain ``lm_head`` does not name ``language_model.lm_head``."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "unknown-vlm"}))
    write_safetensors(model / "model.safetensors", [
        "language_model.model.layers.0.self_attn.q_proj.weight", "language_model.lm_head.weight",
        "vision_tower.encoder.layers.0.fc1.weight",
    ])
    recipe = tmp_path / "r.yaml"
    recipe.write_text("q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                      "      targets: ['re:.*q_proj$']\n      ignore: [lm_head, 're:.*lm_head']\n")
    _, found = lint(recipe, model, "--compat", "llmcompressor")
    missing = [d for d in found if d[0] == "P001" and d[1] != "info"]
    assert [d[2:4] for d in missing] == [(6, 16)]
    assert "language_model.lm_head" in missing[0][5]


def test_ignore_everything(llama: Path, tmp_path: Path) -> None:
    """llm-compressor #91: ``ignore: ["re:.*"]`` leaves GPTQ nothing to quantize."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                      "      targets: [Linear]\n      ignore: ['re:.*']\n")
    _, found = lint(recipe, llama, "--compat", "llmcompressor")
    assert [d[:4] for d in found if d[0] == "P007"] == [("P007", "warning", 6, 15)]


def test_weights_are_not_read(llama: Path, tmp_path: Path) -> None:
    """A copy whose tensor data is cut off after the header lints the same."""
    cut = tmp_path / "cut"
    cut.mkdir()
    for f in llama.iterdir():
        data = f.read_bytes()
        if f.suffix == ".safetensors":
            data = data[: 8 + int.from_bytes(data[:8], "little")]
        (cut / f.name).write_bytes(data)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    assert lint(recipe, cut) == lint(recipe, llama)
