"""Nothing wrong runs: the Python API refuses what ``recipe-spec validate`` refuses, before the
model is touched, with the same located diagnostics; what only the model or the optimizer
shows is refused at ``modify()`` with a located diagnostic, never a raw error mid-training."""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from torch_nets import build, sparsity, train  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec import RecipeError, ScheduledModifierManager  # noqa: E402
from recipe_spec.diagnostics.base import Severity  # noqa: E402
from recipe_spec.diagnostics.codes import CODES  # noqa: E402
from recipe_spec.validation import validate  # noqa: E402


def _errors(text: str) -> list[str]:
    return [d.format() for d in validate(text) if d.severity is Severity.ERROR]


def _refused_examples() -> list[tuple[str, str]]:
    """(code, recipe) for each code whose documented example, as written or as the body of a
    ``modifiers:`` list, makes ``validate`` report that code as an error."""
    out = []
    for code_id, c in sorted(CODES.items()):
        if not c.example or c.example.startswith("recipe-spec "):
            continue
        for text in (c.example, "modifiers:\n" + textwrap.indent(c.example, "  ") + "\n"):
            if any(d.code == code_id and d.severity is Severity.ERROR for d in validate(text)):
                out.append((code_id, text))
                break
    return out


REFUSED = _refused_examples()


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _untouched(model: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_the_rule_walk_covers_every_family_that_has_examples() -> None:
    families = {code[0] for code, _ in REFUSED}
    assert {"Y", "S", "V", "M", "E"} <= families, families


@pytest.mark.parametrize(("code", "text"), REFUSED, ids=[c for c, _ in REFUSED])
def test_every_rule_example_is_refused_before_the_model_is_touched(code: str, text: str) -> None:
    model, opt, _, _ = build()
    before = _snapshot(model)
    with pytest.raises(RecipeError) as info:
        ScheduledModifierManager.from_yaml(text).modify(model, opt, 4)
    got = {d.code for d in info.value.diagnostics}
    assert code in got
    assert _untouched(model, before)
    assert not opt.state  # the optimizer never stepped


GMP = """modifiers:
  - !GMPruningModifier
    params: [fc1.weight]
    init_sparsity: 0.05
    {final}
    start_epoch: 0
    end_epoch: 2
    {freq}
"""

ISSUE_CASES = {
    "misspelt": GMP.format(final="final_sparsty: 0.85", freq="update_frequncy: 1.0"),
    "full_sparsity_misspelt_func": GMP.format(final="final_sparsity: 1.0\n    inter_fucn: cubic", freq="update_frequency: 0.5"),
    "sparsity_above_one": GMP.format(final="final_sparsity: 1.5", freq="update_frequency: 0.5"),
    "bogus_mask": GMP.format(final="final_sparsity: 0.5\n    mask_type: bogus", freq="update_frequency: 0.5"),
    "negative_frequency": GMP.format(final="final_sparsity: 0.5", freq="update_frequency: -3"),
    "ignore_inf": "modifiers:\n  - !QuantizationModifier\n    start_epoch: 0\n    ignore: -.inf\n",
}


@pytest.mark.parametrize("name", sorted(ISSUE_CASES))
def test_issue_recipes_are_refused_with_what_validate_prints(name: str) -> None:
    text = ISSUE_CASES[name]
    expected = _errors(text)
    assert expected, f"validate accepts {name}"
    with pytest.raises(RecipeError) as info:
        ScheduledModifierManager.from_yaml(text)
    assert [d.format() for d in info.value.diagnostics] == expected


def test_misspelt_arguments_name_both_and_say_where() -> None:
    text = ISSUE_CASES["misspelt"]
    with pytest.raises(RecipeError) as info:
        ScheduledModifierManager.from_yaml(text)
    lines = text.splitlines()
    m002 = [d for d in info.value.diagnostics if d.code == "M002"]
    assert {lines[d.line - 1].split(":")[0].strip() for d in m002} == {"final_sparsty", "update_frequncy"}
    assert all(d.hint for d in info.value.diagnostics)
    assert "M003" not in {d.code for d in info.value.diagnostics}  # a typo is said once, as M002


def test_a_recipe_object_is_checked_on_every_path(tmp_path: Path) -> None:
    text = ISSUE_CASES["sparsity_above_one"]
    path = tmp_path / "r.yaml"
    path.write_text(text)
    recipe = recipe_spec.load(path)  # loading alone does not validate
    model, opt, _, _ = build()
    before = _snapshot(model)
    for attempt in (lambda: ScheduledModifierManager.from_yaml(recipe),
                    lambda: ScheduledModifierManager(recipe),
                    lambda: recipe.compile("torch").modify(model, opt, 4),
                    lambda: recipe.compile("torch").apply(model)):
        with pytest.raises(RecipeError) as info:
            attempt()
        assert all(d.file == str(path) for d in info.value.diagnostics)
        assert "M011" in {d.code for d in info.value.diagnostics} or "M005" in {d.code for d in info.value.diagnostics}
    assert _untouched(model, before)


def test_recipe_variables_with_a_loaded_recipe_are_refused_not_ignored() -> None:
    recipe = recipe_spec.loads("num_epochs: 2\nmodifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: eval(num_epochs)}\n")
    with pytest.raises(ValueError, match="recipe_variables"):
        ScheduledModifierManager.from_yaml(recipe, recipe_variables={"num_epochs": 3})


def test_noqa_silences_an_error_here_as_in_validate() -> None:
    text = GMP.format(final="final_sparsity: 0.5", freq="update_frequency: 0.5\n    bogus_arg: 1  # noqa: M002")
    assert _errors(text) == []
    model, opt, x, y = build()
    opt = ScheduledModifierManager.from_yaml(text).modify(model, opt, 4)
    train(model, opt, x, y, 9)
    assert sparsity(model.fc1.weight) == pytest.approx(0.5, abs=1e-3)


def test_warnings_are_given_once_per_file_and_location() -> None:
    text = "modifiers:\n  - !TrainableParamsModifier\n    params: [fc2.bias]\n    start_epoch: 0\n    end_epoch: 1\n"
    expected = [d.format() for d in validate(text) if d.severity is Severity.WARNING]
    assert expected
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        ScheduledModifierManager.from_yaml(text)
    with warnings.catch_warnings(record=True) as second:
        warnings.simplefilter("always")
        ScheduledModifierManager.from_yaml(text).modify(*build()[:2], 4)
    assert [str(w.message) for w in first if str(w.message) in expected] == expected
    assert not [w for w in second if str(w.message) in expected]


def test_training_stack_callbacks_refuse_at_construction() -> None:
    text = ISSUE_CASES["bogus_mask"]
    for module in ("recipe_spec.integrations.transformers", "recipe_spec.integrations.lightning"):
        callback = __import__(module, fromlist=["RecipeCallback"]).RecipeCallback
        with pytest.raises(RecipeError) as info:
            callback(text)
        assert "M006" in {d.code for d in info.value.diagnostics}


# -- what only the model or the optimizer shows ----------------------------------------------
def _refused_at_modify(text: str, model: nn.Module | None = None, opt=None) -> RecipeError:
    if model is None:
        model, opt, _, _ = build()
    assert _errors(text) == [], "validate alone cannot know this"
    manager = ScheduledModifierManager.from_yaml(text)
    before = _snapshot(model)
    with pytest.raises(RecipeError) as info:
        manager.modify(model, opt, 4)
    assert _untouched(model, before)
    return info.value


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_param_group_the_optimizer_lacks() -> None:
    text = "modifiers:\n  - !SetLearningRateModifier\n    learning_rate: 0.01\n    start_epoch: 1\n    param_groups: [0, 5]\n"
    error = _refused_at_modify(text)
    (d,) = error.diagnostics
    assert d.code == "M005" and "group 5" in d.message and d.line == _line_of(text, "param_groups")
    assert d.column == text.splitlines()[d.line - 1].index("5") + 1
    model, opt, x, y = build(groups=True)  # two groups: [0, 1] fits
    opt = ScheduledModifierManager.from_yaml(text.replace("[0, 5]", "[0, 1]")).modify(model, opt, 4)
    train(model, opt, x, y, 5)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.01]


def test_layer_the_model_lacks() -> None:
    text = "modifiers:\n  - !LayerPruningModifier\n    layers: [fc9]\n    start_epoch: 1\n    end_epoch: -1\n"
    (d,) = _refused_at_modify(text).diagnostics
    assert d.code == "P006" and "fc9" in d.message and d.line == _line_of(text, "layers")
    assert "fc1" in d.hint


class Chain(nn.Module):
    """Three same-width layers: removing the middle one keeps the shapes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


REMOVE = """modifiers:
  - !GMPruningModifier
    params: [b.weight]
    init_sparsity: 0.05
    final_sparsity: 0.5
    start_epoch: 0
    end_epoch: {end}
    update_frequency: 0.5
  - !LayerPruningModifier
    layers: [b]
    start_epoch: 1
    end_epoch: -1
"""


def test_layer_removed_while_still_pruned() -> None:
    model = Chain()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    text = REMOVE.format(end=2)
    (d,) = _refused_at_modify(text, model, opt).diagnostics
    assert d.code == "P003" and "b.weight" in d.message and d.line == _line_of(text, "layers: [b]")
    # removed once its pruning has ended: runs
    model = Chain()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ScheduledModifierManager.from_yaml(REMOVE.format(end=1))
    opt = manager.modify(model, opt, 4)
    for _ in range(8):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    manager.finalize()
    assert isinstance(model.b, nn.Identity)


def test_weight_frozen_before_its_pruning_starts_is_pruned_and_stays_frozen() -> None:
    text = GMP.format(final="final_sparsity: 0.5", freq="update_frequency: 0.5").replace("start_epoch: 0", "start_epoch: 1") + (
        "  - !TrainableParamsModifier\n    params: [fc1.weight]\n    trainable: false\n    start_epoch: 0\n    end_epoch: 2.5\n")
    model, opt, x, y = build()
    w0 = model.fc1.weight.detach().clone()
    manager = ScheduledModifierManager.from_yaml(text)
    opt = manager.modify(model, opt, 4)
    train(model, opt, x, y, 9)
    kept = model.fc1.weight != 0
    assert sparsity(model.fc1.weight) == pytest.approx(0.5, abs=1e-3)
    assert torch.equal(model.fc1.weight[kept], w0[kept]) and not model.fc1.weight.requires_grad
    train(model, opt, x, y, 4, 9)  # trainable again: its gradients are masked from now on
    assert model.fc1.weight.requires_grad
    assert torch.equal(model.fc1.weight != 0, kept) and not torch.equal(model.fc1.weight[kept], w0[kept])
    manager.finalize()


def test_global_sparsity_with_a_structured_mask() -> None:
    text = GMP.format(final="final_sparsity: 0.5\n    mask_type: block4", freq="update_frequency: 0.5").replace(
        "[fc1.weight]", "[fc1.weight, fc2.weight]") + "    global_sparsity: true\n"
    errors = [d for d in validate(text) if d.severity is Severity.ERROR]
    assert not errors
    model, opt, _, _ = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = ScheduledModifierManager.from_yaml(text)
    before = _snapshot(model)
    with pytest.raises(RecipeError) as info:
        manager.modify(model, opt, 4)
    assert _untouched(model, before)
    (d,) = info.value.diagnostics
    assert d.code == "M006" and "block4" in d.message and d.line == _line_of(text, "mask_type")


MFAC = """modifiers:
  - !MFACPruningModifier
    params: [fc1.weight]
    init_sparsity: 0.05
    final_sparsity: 0.5
    start_epoch: 1
    end_epoch: 2
    update_frequency: 0.5
    num_grads: 2
    grads_device: {device}
"""


def test_mfac_grads_device_as_a_cuda_index_runs() -> None:
    model, opt, x, y = build()
    manager = ScheduledModifierManager.from_yaml(MFAC.format(device=0))
    opt = manager.modify(model, opt, 4)
    train(model, opt, x, y, 9)
    manager.finalize()
    assert sparsity(model.fc1.weight) == pytest.approx(0.5, abs=1e-3)


def test_mfac_grads_device_that_is_no_device() -> None:
    text = MFAC.format(device="gpu0")
    (d,) = _refused_at_modify(text).diagnostics
    assert d.code == "M012" and "gpu0" in d.message and d.line == _line_of(text, "grads_device")


# -- Keras: the same refusals, before the model or the optimizer is touched ------------------
def test_keras_refuses_what_validate_refuses_and_a_missing_param_group() -> None:
    keras = pytest.importorskip("keras")
    import numpy as np
    from keras_nets import keras_twin

    model = keras_twin()
    opt = keras.optimizers.SGD(learning_rate=0.1)
    before = [np.array(w) for w in model.get_weights()]
    text = ISSUE_CASES["misspelt"]
    with pytest.raises(RecipeError) as info:
        ScheduledModifierManager.from_yaml(text).modify(model, opt, 4)
    assert [d.format() for d in info.value.diagnostics] == _errors(text)
    with pytest.raises(RecipeError):
        recipe_spec.loads(text).compile("keras")
    groups = "modifiers:\n  - !SetLearningRateModifier\n    learning_rate: 0.01\n    start_epoch: 1\n    param_groups: [1]\n"
    with pytest.raises(RecipeError) as info:
        ScheduledModifierManager.from_yaml(groups).modify(model, opt, 4)
    assert [d.code for d in info.value.diagnostics] == ["M005"]
    assert all(np.array_equal(a, np.array(b)) for a, b in zip(before, model.get_weights(), strict=True))
    assert float(keras.ops.convert_to_numpy(opt.learning_rate)) == pytest.approx(0.1)
