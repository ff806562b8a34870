"""Stage/group recipes of SparseML 1.6+ and llm-compressor: each complaint of
the stage/group dialect's reference notes (../shared/reference/core-dialect.md, section 4) and each version drift gives a located
diagnostic with a hint, under the ``--compat`` choice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recipe_spec.validation import validate

STAGE = "quant_stage:\n  quant_modifiers:\n"


def run(text: str, compat: str | None = None) -> list[tuple[str, str, int, int, str, str]]:
    return [(d.code, d.severity.value, d.line, d.column, d.message, d.hint)
            for d in validate(text, compat=compat)]


def codes_at(text: str, compat: str | None = None) -> list[tuple[str, str, int, int]]:
    return [d[:4] for d in run(text, compat)]


def test_misspelt_argument_is_an_error_in_every_version() -> None:
    """llm-compressor #1226: ``dampen`` was accepted silently before 0.7."""
    text = STAGE + "    SparseGPTModifier:\n      sparsity: 0.5\n      dampening_frc: 0.1\n"
    for compat in (None, "sparseml==1.8", "llmcompressor==0.5", "llmcompressor"):
        found = [d for d in run(text, compat) if d[0] == "M002"]
        assert [d[:4] for d in found] == [("M002", "error", 5, 7)], compat
        assert "dampening_frac" in found[0][5]


def test_group_placed_directly_under_the_modifier() -> None:
    """llm-compressor #1225: ``group_0`` directly under GPTQModifier was accepted."""
    text = STAGE + ("    GPTQModifier:\n      targets: [Linear]\n      group_0:\n"
                    "        weights: {num_bits: 4}\n        targets: [Linear]\n")
    found = [d for d in run(text) if d[0] == "M002"]
    assert [d[:4] for d in found] == [("M002", "error", 5, 7)]
    assert "config_groups" in found[0][5]


def test_removed_argument_by_version() -> None:
    """GPTQModifier.sequential_update: accepted up to 0.7, refused from 0.8 (extra=forbid)."""
    text = STAGE + "    GPTQModifier:\n      scheme: W4A16\n      sequential_update: false\n"
    assert ("C001", "error", 5, 7) in codes_at(text, "llmcompressor==0.8")
    assert not [c for c in codes_at(text, "llmcompressor==0.7") if c[0] == "C001"]
    warning = [d for d in run(text) if d[0] == "C001"]
    assert [d[:4] for d in warning] == [("C001", "warning", 5, 7)]
    assert "0.8" in warning[0][4]


def test_mis_indented_recipe_is_empty_for_llm_compressor() -> None:
    """The group sits beside its stage, not under it: llm-compressor >= 0.7 reads an empty
    recipe without a word, SparseML a 'default' stage."""
    text = "sparsity_stage:\nsparsity_modifiers:\n  SparseGPTModifier:\n    sparsity: 0.5\n"
    llmc = [d for d in run(text, "llmcompressor") if d[0] == "C002"]
    assert ("C002", "error", 2, 1) in [d[:4] for d in llmc]
    assert any("empty" in d[4] for d in llmc)
    assert ("C002", "warning", 1, 1) in codes_at(text, "sparseml")  # the stage holds nothing
    assert not [c for c in codes_at(text, "sparseml") if c[:3] == ("C002", "error", 2)]
    assert ("C002", "warning", 2, 1) in codes_at(text)


def test_eval_by_version() -> None:
    text = ("n: 2\n" + STAGE + "    GPTQModifier:\n      scheme: W4A16\n      block_size: eval(n * 64)\n")
    assert ("C003", "error", 6, 19) in codes_at(text, "llmcompressor==0.6")
    assert not [c for c in codes_at(text, "llmcompressor==0.5") if c[0] == "C003"]
    assert not [c for c in codes_at(text, "sparseml==1.8") if c[0] == "C003"]
    assert ("C003", "warning", 6, 19) in codes_at(text)
    nested = text.replace("eval(n * 64)", "eval((n + 1) * 64)")
    assert ("C003", "error", 6, 19) in codes_at(nested, "sparseml==1.8")


def test_run_type() -> None:
    text = "a_stage:\n  run_type: oneshot\n  a_modifiers:\n    GPTQModifier: {scheme: W4A16}\n"
    assert ("C002", "warning", 2, 3) in codes_at(text, "llmcompressor==0.5")
    assert not [c for c in codes_at(text, "llmcompressor==0.4") if c[0] == "C002"]
    bad = text.replace("oneshot", "one-shot")
    assert ("M006", "error", 2, 13) in codes_at(bad, "sparseml==1.8")
    typo = text.replace("run_type", "run_typ")
    found = [d for d in run(typo) if d[0] == "C002"]
    assert [d[:4] for d in found] == [("C002", "warning", 2, 3)] and "run_type" in found[0][5]


def test_awq_needs_a_later_quantization_modifier() -> None:
    text = STAGE + "    AWQModifier:\n      duo_scaling: both\n"
    assert ("C004", "error", 3, 5) in codes_at(text, "llmcompressor")
    assert not [c for c in codes_at(text, "llmcompressor==0.10") if c[0] == "C004"]
    fixed = text + "    QuantizationModifier:\n      scheme: W4A16\n      targets: [Linear]\n"
    assert not [c for c in codes_at(fixed, "llmcompressor") if c[0] == "C004"]


def test_null_arguments_and_plain_modifiers_key() -> None:
    text = "a_stage:\n  a_modifiers:\n    ConstantPruningModifier:\n"
    assert ("S006", "error", 3, 5) in codes_at(text)
    plain = "modifiers:\n  GPTQModifier: {scheme: W4A16}\n"
    assert ("C002", "error", 1, 1) in codes_at(plain)


def test_two_dialects_in_one_file() -> None:
    text = STAGE + "    GPTQModifier: {scheme: W4A16}\n  other_modifiers:\n    - !GMPruningModifier {}\n"
    assert codes_at(text)[:1] == [("S003", "error", 5, 5)]


def test_cli_compat(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(STAGE + "    GPTQModifier:\n      scheme: W4A16\n      sequential_update: false\n")
    cli = [sys.executable, "-m", "recipe_spec", "validate", str(path), "--format", "json"]
    old = subprocess.run(cli + ["--compat", "llmcompressor==0.7"], capture_output=True, text=True)
    new = subprocess.run(cli + ["--compat", "llmcompressor"], capture_output=True, text=True)
    assert (old.returncode, new.returncode) == (0, 1), (old.stdout, new.stdout)
    found = json.loads(new.stdout)["files"][0]["diagnostics"]
    assert [(d["code"], d["line"], d["column"]) for d in found] == [("C001", 5, 7)]
    bad = subprocess.run(cli + ["--compat", "llmcompressor==0.99"], capture_output=True, text=True)
    assert bad.returncode == 2 and "0.14" in bad.stderr


@pytest.mark.parametrize("modifier", ["AutoRoundModifier: {scheme: W4A16, iters: 10}"])
def test_one_shot_modifiers_are_refused_by_backends_that_do_not_run_them(modifier: str) -> None:
    """keras does not run AutoRound (capability quantize:autoround); torch runs it in
    recipe_spec.oneshot, so validate --backend torch has nothing to say."""
    text = STAGE + f"    {modifier}\n"
    found = [d for d in validate(text, backend="keras") if d.code == "B001"]
    assert [(d.line, d.column) for d in found] == [(3, 5)]
    assert "torch" in found[0].hint and "one-shot" in found[0].message
    assert [d for d in validate(text, backend="torch") if d.code == "B001"] == []


def test_modify_refuses_a_stage_group_recipe_with_located_errors() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec import RecipeError, ScheduledModifierManager

    text = STAGE + ("    ConstantPruningModifier:\n      targets: ['re:.*weight']\n      start: 0\n"
                    "    GPTQModifier: {scheme: W4A16}\n")
    manager = ScheduledModifierManager.from_yaml(text)
    model = torch.nn.Linear(4, 2)
    with pytest.raises(RecipeError) as caught:
        manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    found = [(d.code, d.line, d.column) for d in caught.value.diagnostics]
    assert found == [("B001", 6, 5)]  # the training-time modifier runs (tests/test_stage_training.py)
    message = caught.value.diagnostics[0].message
    assert "one-shot" in message and "llm-compressor" in message


def test_the_dialect_has_one_name_and_its_former_name_still_compares_equal() -> None:
    """``Recipe.dialect`` is ``"stage"`` for a stage/group recipe; code written against the
    former name ``"core"`` keeps working, told by a DeprecationWarning."""
    import warnings

    from recipe_spec import load
    from recipe_spec.recipe import Recipe

    recipe = load(STAGE + "    SparseGPTModifier:\n      sparsity: 0.5\n")
    assert recipe.dialect == "stage" and str(recipe.dialect) == "stage"
    assert load("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 1}\n").dialect == "modifier"
    with pytest.warns(DeprecationWarning, match="now called 'stage'"):
        assert recipe.dialect == "core"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert recipe.dialect != "modifier"
        assert json.dumps({"dialect": recipe.dialect}) == '{"dialect": "stage"}'
    assert Recipe(stages=(), dialect="core").dialect == "stage"


NUMBERED = ("quant_stage_1:\n  quant_modifiers:\n    SmoothQuantModifier:\n      smoothing_strength: 0.8\n"
            "quant_stage_2:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W8A8\n      targets: [Linear]\n")


def test_numbered_stage_keys_are_an_error_in_every_release_with_the_rename() -> None:
    """llm-compressor 0.14 reads a stage key only when it ends in '_stage' (its nightly after
    0.14 also reads '<name>_stage_<n>'): the numbered stages would be dropped, the recipe empty."""
    for compat in (None, "llmcompressor==0.9", "llmcompressor"):
        found = [d for d in run(NUMBERED, compat) if d[0] == "C002"]
        assert [d[:4] for d in found] == [("C002", "error", 1, 1), ("C002", "error", 5, 1)], compat
        assert "'quant_stage_1' is not a stage to llm-compressor 0.14" in found[0][4]
        assert "as stage 'quant'" in found[0][4] and found[1][5].startswith("Rename it 'quant_2_stage'")
    # the modifiers inside are still checked
    assert "M002" in [d[0] for d in run(NUMBERED.replace("smoothing_strength", "smoothing_strenght"))]
    assert not [d for d in run(NUMBERED.replace("_stage_1", "_1_stage").replace("_stage_2", "_2_stage"))
                if d[1] == "error"]
