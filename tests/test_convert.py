"""``recipe-spec convert``: what converts (comments and variables kept, step for step the same
run), what is refused and where, release moves checked against llm-compressor's own split, and
the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from testdata import llmcompressor_python

from recipe_spec import ScheduledModifierManager, loads
from recipe_spec.cli import main
from recipe_spec.convert import Target, convert_text
from recipe_spec.validation import validate

STAGE, MODIFIER = Target.parse("stage"), Target.parse("modifier")

TAGGED = textwrap.dedent(r"""
    # pruning for the tiny net
    final: 0.8  # the target
    modifiers:
      # hold conv1's zeros
      - !ConstantPruningModifier
        params: ['re:conv1\.weight$']
        start_epoch: 0.0
        end_epoch: 3.0
      - !MagnitudePruningModifier  # the gradual one
        params: ['re:fc1\.weight$', 're:conv2\.weight$']
        init_sparsity: 0.05
        final_sparsity: eval(final)
        start_epoch: 0.5
        end_epoch: 2.5
        update_frequency: 0.5
        mask_type: "unstructured"
      - !GMPruningModifier
        params: [fc2.weight]
        init_sparsity: 0.0
        final_sparsity: 0.5
        start_epoch: 0
        end_epoch: 2
        update_frequency: 1
        log_types: __ALL__
        global_sparsity: false
""")


def test_modifier_to_stage_keeps_comments_variables_and_text() -> None:
    result = convert_text(TAGGED, "r.yaml", Target.parse("sparseml==1.8"))
    assert result.ok and result.text is not None, result.refusals
    text = result.text
    for kept in ("# pruning for the tiny net", "final: 0.8  # the target", "# hold conv1's zeros",
                 "MagnitudePruningModifier:  # the gradual one", "final_sparsity: eval(final)",
                 "targets: ['re:fc1\\.weight$', 're:conv2\\.weight$']", 'mask_structure: "unstructured"'):
        assert kept in text, kept
    assert "log_types" not in text and "global_sparsity" not in text
    assert not [d for d in validate(text, compat="sparseml==1.8") if str(d.severity) == "error"]
    recipe = loads(text)
    assert [m.type for m in recipe.modifiers] == ["ConstantPruningModifier", "MagnitudePruningModifier",
                                                  "MagnitudePruningModifier"]
    assert [g.name for g in recipe.stages[0].groups] == ["pruning_modifiers", "pruning_2_modifiers"]
    assert any("log_types" in n.message for n in result.notes)


def test_llm_compressor_target_gets_values_not_expressions() -> None:
    """llm-compressor passes eval(...) through as text (C003): the result is evaluated."""
    result = convert_text(TAGGED, "r.yaml", Target.parse("llmcompressor==0.13"))
    assert result.ok and result.text is not None and result.evaluated
    assert "eval(" not in result.text and "final_sparsity: 0.8" in result.text
    assert "leave_enabled: true" in result.text  # SparseML's default; llm-compressor 0.5+ says false


def _torch_run(text: str) -> list[dict]:
    torch = pytest.importorskip("torch")
    from torch_nets import build

    model, optimizer, inputs, targets = build(seed=0)
    with torch.no_grad():
        model.conv1.weight[model.conv1.weight.abs() < 0.1] = 0.0
    manager = ScheduledModifierManager.from_yaml(text)
    optimizer = manager.modify(model, optimizer, steps_per_epoch=4)
    rows = []
    for k in range(14):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[k % 8]), targets[k % 8]).backward()
        optimizer.step()
        rows.append(({n: (e.mask.numpy().copy(), e.applied_sparsity)
                      for n, e in manager.runtime.masks.params.items()},
                     {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
                     optimizer.param_groups[0]["lr"]))
    manager.finalize(model)
    return rows


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_magnitude_and_constant_pruning_run_the_same_after_conversion() -> None:
    source = TAGGED
    converted = convert_text(source, "r.yaml", STAGE)
    assert converted.ok and converted.text is not None
    a, b = _torch_run(source), _torch_run(converted.text)
    assert any(s and s > 0.3 for masks, _, _ in a for _, s in masks.values())
    for (ma, wa, la), (mb, wb, lb) in zip(a, b, strict=True):
        assert la == lb and ma.keys() == mb.keys()
        for n, (mask, applied) in ma.items():
            assert applied == mb[n][1] and np.array_equal(mask, mb[n][0]), n
        for n, w in wa.items():
            assert np.array_equal(w, wb[n]), n


# -- refused, located -----------------------------------------------------------------------

REFUSED = {
    "no twin": ("modifiers:\n  - !SetLearningRateModifier {start_epoch: 0, learning_rate: 0.1}\n",
                (2, 5), "SetLearningRateModifier has no twin", "learning_rate"),
    "epoch range": ("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}\n",
                    (2, 5), "EpochRangeModifier has no twin", "--drop-epoch-range"),
    "global": ("modifiers:\n  - !GMPruningModifier\n    params: [a.weight]\n    init_sparsity: 0.05\n"
               "    final_sparsity: 0.8\n    start_epoch: 0\n    end_epoch: 2\n"
               "    update_frequency: 1\n    global_sparsity: true\n",
               (9, 5), "global_sparsity: True", "Delete global_sparsity"),
    "block mask": ("modifiers:\n  - !MagnitudePruningModifier\n    params: [a.weight]\n"
                   "    init_sparsity: 0.05\n    final_sparsity: 0.8\n    start_epoch: 0\n"
                   "    end_epoch: 2\n    update_frequency: 1\n    mask_type: [1, 4]\n",
                   (9, 5), "mask_structure '(1, 4)'", "keep the !Modifier"),
    "layer distillation": ("modifiers:\n  - !DistillationModifier\n    start_epoch: 0\n",
                           (2, 5), "a different algorithm", "keep the !Modifier"),
    "never starts": ("modifiers:\n  - !ConstantPruningModifier {params: [a.weight], start_epoch: -1}\n",
                     (2, 5), "start -1", "start: 0"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_where_it_has_no_twin(name: str) -> None:
    text, where, what, how = REFUSED[name]
    result = convert_text(text, "r.yaml", STAGE)
    assert result.text is None and result.refusals
    first = result.refusals[0]
    assert (first.line, first.column) == where
    assert what in first.what and how in first.how


def test_second_stage_refused() -> None:
    text = ("a_stage:\n  a_modifiers:\n    - !ConstantPruningModifier {params: [a.weight], start_epoch: 0}\n"
            "b_stage:\n  b_modifiers:\n    - !ConstantPruningModifier {params: [b.weight], start_epoch: 0}\n")
    result = convert_text(text, "r.yaml", STAGE)
    assert [(r.line, "second stage" in r.what) for r in result.refusals] == [(4, True)]


def test_epoch_range_dropped_on_request_with_the_epochs_to_train() -> None:
    text = "modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}\n" + \
        "  - !ConstantPruningModifier {params: [a.weight], start_epoch: 0}\n"
    result = convert_text(text, "r.yaml", STAGE, drop_epoch_range=True)
    assert result.ok and "EpochRange" not in (result.text or "")
    assert any("train for 5 epochs" in n.message and n.line == 2 for n in result.notes)


# -- stage/group -> !Modifier --------------------------------------------------------------

CORE = textwrap.dedent("""\
    train_stage:
      pruning_modifiers:
        # the gradual one
        MagnitudePruningModifier:
          targets: ['re:fc1.weight']  # fc1 only
          init_sparsity: 0.05
          final_sparsity: 0.5
          start: 0
          end: 2
          update: 1
""")


def test_stage_to_modifier_and_release_defaults() -> None:
    result = convert_text(CORE, "c.yaml", MODIFIER)
    assert result.ok and result.text is not None
    assert "  - !MagnitudePruningModifier" in result.text
    assert "    params: ['re:fc1.weight']  # fc1 only" in result.text and "# the gradual one" in result.text
    assert "leave_enabled" not in result.text  # SparseML's default, the !Modifier default
    newer = convert_text(CORE, "c.yaml", MODIFIER, source=Target.parse("llmcompressor==0.13").compat)
    assert newer.ok and "leave_enabled: false" in (newer.text or "")
    again = convert_text(result.text, "m.yaml", STAGE)
    assert again.ok and loads(again.text or "").modifiers[0].args == loads(CORE).modifiers[0].args


def test_one_shot_stage_refused_going_to_modifier() -> None:
    text = CORE + "oneshot_stage:\n  quant_modifiers:\n    GPTQModifier: {scheme: W4A16, targets: [Linear]}\n"
    result = convert_text(text, "c.yaml", MODIFIER)
    assert [(r.line, r.column) for r in result.refusals] == [(13, 5)]
    assert "one-shot" in result.refusals[0].what


# -- across releases -------------------------------------------------------------------------

OLD_AWQ = textwrap.dedent("""\
    # written for llm-compressor 0.10
    quant_stage:
      quant_modifiers:
        AWQModifier:
          # activation-aware scales
          duo_scaling: both
          sequential_targets: [LlamaDecoderLayer]  # one layer at a time
          scheme: W4A16_ASYM
          targets: [Linear]
          ignore: [lm_head]  # keep the head
""")


def test_awq_split_and_sequential_targets_moved_to_oneshot() -> None:
    assert [d.code for d in validate(OLD_AWQ, compat="llmcompressor==0.10")] == []
    result = convert_text(OLD_AWQ, "awq.yaml", Target.parse("llmcompressor==0.13"))
    assert result.ok and result.text is not None
    assert result.text == textwrap.dedent("""\
        # written for llm-compressor 0.10
        quant_stage:
          quant_modifiers:
            AWQModifier:
              # activation-aware scales
              duo_scaling: both
            QuantizationModifier:
              scheme: W4A16_ASYM
              targets: [Linear]
              ignore: [lm_head]  # keep the head
        """)
    assert [d for d in validate(result.text, compat="llmcompressor==0.13")] == []
    moved = [n for n in result.notes if "oneshot()" in n.message]
    assert [(n.line, "sequential_targets=['LlamaDecoderLayer']" in n.message) for n in moved] == [(7, True)]


def test_removed_modifier_refused_at_its_line() -> None:
    text = ("train_stage:\n  distill_modifiers:\n    OutputDistillationModifier:\n"
            "      targets: [re:model.layers.\\d+$]\n      start: 0\n")
    result = convert_text(text, "d.yaml", Target.parse("llmcompressor==0.13"))
    assert result.text is None
    assert [(r.line, r.column) for r in result.refusals] == [(3, 5)]
    assert "OutputDistillationModifier does not exist in llm-compressor 0.13" in result.refusals[0].what
    assert convert_text(text, "d.yaml", Target.parse("llmcompressor==0.8")).ok


LCPYTHON = llmcompressor_python()

_SPLIT_CHECK = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from llmcompressor.recipe import Recipe
from llmcompressor.modifiers.awq import AWQModifier  # the compatibility shim: the old API
old = json.loads(sys.argv[1])
shim = [type(m).__name__ + json.dumps(m.model_dump(exclude={"index", "group"}), sort_keys=True, default=str)
        for m in AWQModifier(**old)]
ours = [type(m).__name__ + json.dumps(m.model_dump(exclude={"index", "group"}), sort_keys=True, default=str)
        for m in Recipe.create_instance(sys.stdin.read()).modifiers]
print(json.dumps(shim == ours))
"""


@pytest.mark.skipif(LCPYTHON is None, reason="needs $LLMCOMPRESSOR_PYTHON: a Python with llm-compressor 0.14")
def test_awq_split_is_what_llm_compressor_makes_of_the_old_form() -> None:
    """llm-compressor 0.14 reads the converted recipe into exactly the two modifiers its
    compatibility shim makes of the old single AWQModifier."""
    result = convert_text(OLD_AWQ, "awq.yaml", Target.parse("llmcompressor==0.14"))
    assert result.ok and result.text is not None
    old = {"duo_scaling": "both", "scheme": "W4A16_ASYM", "targets": ["Linear"], "ignore": ["lm_head"]}
    import json

    run = subprocess.run([str(LCPYTHON), "-c", _SPLIT_CHECK, json.dumps(old)], input=result.text,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "true"


# -- the command line ---------------------------------------------------------------------

def test_cli_stdout_output_file_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "r.yaml"
    src.write_text(TAGGED)
    assert main(["convert", str(src)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# pruning for the tiny net") and "train_stage:" in out
    assert "Converted" in err and "no error" in err
    dest = tmp_path / "stage.yaml"
    assert main(["convert", str(src), "--to", "sparseml==1.8", "-o", str(dest)]) == 0
    assert capsys.readouterr().out == "" and "train_stage:" in dest.read_text()
    assert main(["convert", str(dest)]) == 0  # the other dialect by default
    assert "- !MagnitudePruningModifier" in capsys.readouterr().out
    bad = tmp_path / "lr.yaml"
    bad.write_text(REFUSED["no twin"][0])
    assert main(["convert", str(bad)]) == 1
    assert f"{bad}:2:5: cannot convert: SetLearningRateModifier" in capsys.readouterr().err
    assert main(["convert", str(src), "--to", "keras"]) == 2
    assert main(["convert", str(tmp_path / "missing.yaml")]) == 2


def test_cli_module_entry(tmp_path: Path) -> None:
    src = tmp_path / "r.yaml"
    src.write_text(CORE)
    run = subprocess.run([sys.executable, "-m", "recipe_spec", "convert", str(src), "--to", "modifier"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "!MagnitudePruningModifier" in run.stdout
