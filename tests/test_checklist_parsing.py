"""SparseML's own parsing tests, restated for recipe-spec.

Each test carries the id of the item it covers in
SparseML's test checklist (the project's reference notes, sections A, B, C and E: variables and
``eval``, modifier YAML, groups and stages, serialization). The recipes are SparseML's test
recipes (``tests/sparseml/optim/test_helpers.py``, ``tests/sparseml/pytorch/helpers.py``,
``tests/sparseml/pytorch/sparsification/test_modifier.py``,
``tests/sparseml/pytorch/optim/test_manager.py``), rebuilt from the checklist.

Where recipe-spec deliberately differs from SparseML (SPEC.md), the test shows recipe-spec's
behaviour and its docstring says why; the ``test_k_*`` tests cover the differences the
checklist's section K lists as "not covered by upstream tests".
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from recipe_spec import Recipe, RecipeError, check, load, loads
from recipe_spec.text.frozen import thaw

# --------------------------------------------------------------------------------------------
# Upstream recipes (tests/sparseml/optim/test_helpers.py)
# --------------------------------------------------------------------------------------------

RECIPE_SIMPLE_EVAL = """
num_epochs: 10.0
pruning_start_epoch: eval(num_epochs * 0.2)
pruning_end_epoch: eval(num_epochs * 0.8)
init_sparsity: 0.2
num_pruning_epochs: 6
pruning_mask_type: [1, 4]

modifiers:
    - !EpochRangeModifier
        end_epoch: 1.0
        start_epoch: 0.0

    - !GMPruningModifier
        end_epoch: eval(pruning_end_epoch)
        final_sparsity: eval(init_sparsity + 0.7)
        init_sparsity: eval(init_sparsity)
        inter_func: cubic
        leave_enabled: True
        mask_type: eval(pruning_mask_type)
        params: __ALL_PRUNABLE__
        start_epoch: eval(pruning_start_epoch)
        update_frequency: 0.01
"""

# pruning_end_epoch refers to pruning_start_epoch, defined on the line below it.
RECIPE_MULTI_EVAL = """
num_epochs: 10.0
pruning_end_epoch: eval(pruning_start_epoch + num_pruning_epochs)
pruning_start_epoch: eval(num_epochs * 0.2)
num_pruning_epochs: 6
init_sparsity: 0.2
pruning_mask_type: [1, 4]

modifiers:
    - !EpochRangeModifier
        end_epoch: 1.0
        start_epoch: 0.0

    - !GMPruningModifier
        end_epoch: eval(pruning_end_epoch)
        final_sparsity: eval(init_sparsity + 0.7)
        init_sparsity: eval(init_sparsity)
        inter_func: cubic
        leave_enabled: True
        mask_type: eval(pruning_mask_type)
        params: __ALL_PRUNABLE__
        start_epoch: eval(pruning_start_epoch)
        update_frequency: 0.01
"""

# Upstream's TARGET_RECIPE repeats `pruning_start_epoch: 2.0` as its last line; PyYAML kept the
# last of the two silently, recipe-spec refuses duplicate keys (Y002, see
# test_k_duplicate_keys_are_errors), so the repeated line is dropped here.
TARGET_RECIPE = """
num_epochs: {num_epochs}
init_sparsity: 0.2
pruning_start_epoch: 2.0
pruning_end_epoch: 8.0
num_pruning_epochs: 6
pruning_mask_type: [1, 4]

modifiers:
- !EpochRangeModifier
    end_epoch: 1.0
    start_epoch: 0.0
- !GMPruningModifier
    end_epoch: 8.0
    final_sparsity: 0.8999999999999999
    init_sparsity: 0.2
    inter_func: cubic
    leave_enabled: true
    mask_type:
    - 1
    - 4
    params: __ALL_PRUNABLE__
    start_epoch: 2.0
    update_frequency: 0.01
"""

RECIPE_SIMPLE_EVAL_W_METADATA = """
num_epochs: 10.0
pruning_start_epoch: eval(num_epochs * 0.2)
pruning_end_epoch: eval(num_epochs * 0.8)
init_sparsity: 0.2
num_pruning_epochs: 6
__metadata__:
  this: is
  metadata: 90

modifiers:
    - !EpochRangeModifier
        end_epoch: 1.0
        start_epoch: 0.0

    - !GMPruningModifier
        end_epoch: eval(pruning_end_epoch)
        final_sparsity: eval(init_sparsity + 0.7)
        init_sparsity: eval(init_sparsity)
        inter_func: cubic
        leave_enabled: True
        log_types: __ALL__
        mask_type: [1, 4]
        params: __ALL_PRUNABLE__
        start_epoch: eval(pruning_start_epoch)
        update_frequency: 0.01
"""

STAGED_RECIPE_SIMPLE = """
first_variable: 10
second_variable: 5
lr_multiplier: 2

first_stage:
  lr: 0.1
  num_epochs: 10
  init_lr: eval(lr * 2)
  final_lr: eval(lr)

  training_modifiers:
    - !EpochRangeModifier
        end_epoch: eval(num_epochs + first_variable)
        start_epoch: 0.0

    - !LearningRateFunctionModifier
      start_epoch: 0
      end_epoch: eval(num_epochs)
      lr_func: linear
      init_lr: eval(init_lr)
      final_lr: eval(final_lr)

next_stage:
  new_num_epochs: 15
  sparsity: 0.9

  modifiers:
    - !EpochRangeModifier
        end_epoch: eval(new_num_epochs)
        start_epoch: eval(second_variable)

    - !GMPruningModifier
        end_epoch: eval(second_variable + first_variable)
        final_sparsity: eval(sparsity)
        init_sparsity: eval(sparsity)
"""

STAGED_RECIPE_SIMPLE_EVAL = """
first_variable: 10
second_variable: 5
lr_multiplier: 2

first_stage:
  lr: 0.1
  num_epochs: 10
  init_lr: 0.2
  final_lr: 0.1

  training_modifiers:
    - !EpochRangeModifier
        end_epoch: 20
        start_epoch: 0.0

    - !LearningRateFunctionModifier
      start_epoch: 0
      end_epoch: 10
      lr_func: linear
      init_lr: 0.2
      final_lr: 0.1

next_stage:
  new_num_epochs: 15
  sparsity: 0.9

  modifiers:
    - !EpochRangeModifier
        end_epoch: 15
        start_epoch: 5

    - !GMPruningModifier
        end_epoch: 15
        final_sparsity: 0.9
        init_sparsity: 0.9
"""

# Upstream's stage `ac_dc_phase` writes `final_lr: eval(final_lr)` and then `final_lr: 0.256`
# (PyYAML kept the last). The duplicate is an error here (Y002, see
# test_k_duplicate_keys_are_errors); FINAL_LR_LINES below puts it back for that test.
STAGED_RECIPE_COMPLEX = """
sparsity: {sparsity}
lr_func: {lr_func}
init_lr: 0.05
final_lr: 0.0
end_epoch: 100
update_frequency: 10
start_epoch: 0.0
global_sparsity: True

ac_dc_phase:
  update_frequency: 5
  end_epoch_global: eval(end_epoch)
  end_epoch: 75
  num_epochs: {num_epochs}
  end_warm_up_epoch: 5.0
  final_lr: 0.256
  sparsity: 0.5
  global_sparsity: False

  training_modifiers:
  - !EpochRangeModifier
    start_epoch: eval(start_epoch)
    end_epoch: eval(end_epoch_global)

  - !LearningRateFunctionModifier
    start_epoch: eval(start_epoch)
    end_epoch: eval(end_warm_up_epoch)
    lr_func: linear
    init_lr: eval(init_lr)
    final_lr: eval(final_lr)

  - !LearningRateFunctionModifier
    start_epoch: eval(end_warm_up_epoch)
    end_epoch: eval(end_epoch_global)
    lr_func: eval(lr_func)
    init_lr: eval(final_lr)
    final_lr: 0.0

  pruning_modifiers:

  - !ACDCPruningModifier
     compression_sparsity: eval(sparsity)
     start_epoch: 1.0
     end_epoch: eval(end_epoch)
     update_frequency: eval(update_frequency)
     params: ['re:.*conv*', 're:.*fc.weight*']
     global_sparsity: eval(global_sparsity)

next_stage:
  new_num_epochs: {new_num_epochs}

  modifiers:
    - !EpochRangeModifier
        end_epoch: eval(end_epoch)
        start_epoch: eval(start_epoch + new_num_epochs)

    - !GMPruningModifier
        end_epoch: eval(end_epoch)
        final_sparsity: eval(sparsity)
        init_sparsity: eval(sparsity)
"""

STAGED_RECIPE_COMPLEX_EVAL = """
sparsity: 0.9
lr_func: cosine
init_lr: 0.05
final_lr: 0.0
end_epoch: 100
update_frequency: 10
start_epoch: 0.0
global_sparsity: True

ac_dc_phase:
  update_frequency: 5
  end_epoch_global: 100
  end_epoch: 75
  num_epochs: 10
  end_warm_up_epoch: 5.0
  final_lr: 0.256
  sparsity: 0.5
  global_sparsity: False

  training_modifiers:
  - !EpochRangeModifier
    start_epoch: 0.0
    end_epoch: 100

  - !LearningRateFunctionModifier
    start_epoch: 0.0
    end_epoch: 5.0
    lr_func: linear
    init_lr: 0.05
    final_lr: 0.256

  - !LearningRateFunctionModifier
    start_epoch: 5.0
    end_epoch: 100
    lr_func: cosine
    init_lr: 0.256
    final_lr: 0.0

  pruning_modifiers:

  - !ACDCPruningModifier
     compression_sparsity: 0.5
     start_epoch: 1.0
     end_epoch: 75
     update_frequency: 5
     params: ['re:.*conv*', 're:.*fc.weight*']
     global_sparsity: False

next_stage:
  new_num_epochs: 15

  modifiers:
    - !EpochRangeModifier
        end_epoch: 100
        start_epoch: 15.0

    - !GMPruningModifier
        end_epoch: 100
        final_sparsity: 0.9
        init_sparsity: 0.9
"""


def complex_recipe(sparsity: float = 0.9, lr_func: str = "cosine", num_epochs: int = 10,
                   new_num_epochs: int = 15) -> str:
    return STAGED_RECIPE_COMPLEX.format(
        sparsity=sparsity, lr_func=lr_func, num_epochs=num_epochs, new_num_epochs=new_num_epochs
    )


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def typed(value: Any) -> Any:
    """``value`` with every leaf paired with its type, so that ``2 == 2.0`` does not pass.

    SparseML's ``_test_nested_equality`` compared types as well as values.
    """
    value = thaw(value)
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def evaluated_view(recipe: Recipe) -> dict[str, Any]:
    """Everything evaluation decides: staged or not, variables, and every modifier's
    evaluated arguments by stage and group, with types."""
    return {
        "staged": recipe.staged,
        "variables": typed(recipe.variables),
        "stages": [
            {
                "name": stage.name,
                "variables": typed(stage.variables),
                "groups": [
                    (group.name, [(m.type, typed(m.args)) for m in group.modifiers])
                    for group in stage.groups
                ],
            }
            for stage in recipe.stages
        ],
    }


def where(diagnostics: Any) -> list[tuple[str, int, int]]:
    return [(d.code, d.line, d.column) for d in diagnostics]


# SparseML's "classless" reading of a recipe (src/sparseml/optim/helpers.py): every `!Name` tag
# not followed by a '.' on its line becomes a key `OBJECT.Name:`, then PyYAML (YAML 1.1) reads it.
_SPARSEML_TAG = re.compile(r"!(?P<class_name>(?!.*\.)[a-zA-Z_][a-zA-Z^._0-9]+)")


def sparseml_classless(text: str) -> Any:
    """SparseML's classless view; it nests modifier arguments only in its own 4/8-space layout."""
    return yaml.safe_load(_SPARSEML_TAG.sub(r"OBJECT.\g<class_name>:", text))


class _TaggedSafeLoader(yaml.SafeLoader):
    """PyYAML (YAML 1.1) safe loading, with `!Name {...}` read as `{"Name": {...}}`."""


_TaggedSafeLoader.add_multi_constructor(
    "!",
    lambda loader, suffix, node: {
        suffix: loader.construct_mapping(node, deep=True) if isinstance(node, yaml.MappingNode) else {}
    },
)


def pyyaml_read(text: str) -> Any:
    return yaml.load(text, Loader=_TaggedSafeLoader)  # noqa: S506 - a SafeLoader subclass


# --------------------------------------------------------------------------------------------
# A. Recipe text -> variables / eval
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe",
    [TARGET_RECIPE.format(num_epochs=10.0), RECIPE_SIMPLE_EVAL, RECIPE_MULTI_EVAL],
    ids=["target-unchanged", "simple-eval", "multi-eval-forward-reference"],
)
def test_c01_evaluate_recipe_equations(recipe: str) -> None:
    """C-01: RECIPE_SIMPLE_EVAL and RECIPE_MULTI_EVAL (whose `pruning_end_epoch` refers to a
    variable defined below it) evaluate to TARGET_RECIPE, types included."""
    target = load(TARGET_RECIPE.format(num_epochs=10.0))
    assert evaluated_view(load(recipe)) == evaluated_view(target)


C01_VALUES = [
    # (where, key, expected value): exact floats, as SparseML computed them
    ("variables", "pruning_start_epoch", 2.0),  # eval(num_epochs * 0.2)
    ("variables", "pruning_end_epoch", 8.0),
    ("GMPruningModifier", "start_epoch", 2.0),
    ("GMPruningModifier", "end_epoch", 8.0),
    ("GMPruningModifier", "final_sparsity", 0.8999999999999999),  # 0.2 + 0.7, not rounded
    ("GMPruningModifier", "init_sparsity", 0.2),
    ("GMPruningModifier", "mask_type", (1, 4)),  # eval(pruning_mask_type): the list itself
    ("GMPruningModifier", "params", "__ALL_PRUNABLE__"),  # tokens are left as written
    ("GMPruningModifier", "leave_enabled", True),
    ("EpochRangeModifier", "end_epoch", 1.0),
]


@pytest.mark.parametrize("recipe", [RECIPE_SIMPLE_EVAL, RECIPE_MULTI_EVAL], ids=["simple", "multi"])
@pytest.mark.parametrize("place,key,expected", C01_VALUES)
def test_c01_evaluated_values(recipe: str, place: str, key: str, expected: Any) -> None:
    """C-01: the individual values, with their types (`0.8999999999999999` is float
    arithmetic, not rounded; `mask_type` is the list `[1, 4]`)."""
    r = load(recipe)
    if place == "variables":
        value = r.variables[key]
    else:
        (modifier,) = [m for m in r.modifiers if m.type == place]
        value = modifier.args[key]
    assert value == expected
    assert type(value) is type(expected)


def test_c01_log_types_and_metadata_tolerated() -> None:
    """C-01: `log_types: __ALL__` (1,836 real GMP entries carry it) loads; `__metadata__` is
    metadata, not a variable; SparseML's serialized form drops `log_types` as SparseML did."""
    r = load(RECIPE_SIMPLE_EVAL_W_METADATA)
    gmp = r.modifiers[1]
    assert gmp.args["log_types"] == "__ALL__"
    assert r.metadata == {"this": "is", "metadata": 90}
    assert "__metadata__" not in r.variables
    assert "log_types" not in r.to_yaml(style="sparseml")
    assert "log_types: __ALL__" in r.to_yaml()


@pytest.mark.parametrize(
    "recipe,expected",
    [
        (STAGED_RECIPE_SIMPLE, STAGED_RECIPE_SIMPLE_EVAL),
        (complex_recipe(), STAGED_RECIPE_COMPLEX_EVAL),
    ],
    ids=["simple", "complex"],
)
def test_c02_staged_equations(recipe: str, expected: str) -> None:
    """C-02: staged recipes evaluate to their `_EVAL` forms, stage variables and modifier
    arguments alike (types included)."""
    assert evaluated_view(load(recipe)) == evaluated_view(load(expected))


C02_VALUES = [
    # (recipe, stage, modifier index in stage or None for stage variables, key, expected)
    ("simple", "first_stage", None, "init_lr", 0.2),  # eval(lr * 2), stage-local lr
    ("simple", "first_stage", None, "final_lr", 0.1),
    ("simple", "first_stage", 0, "end_epoch", 20),  # stage num_epochs + global first_variable
    ("simple", "first_stage", 1, "end_epoch", 10),
    ("simple", "first_stage", 1, "init_lr", 0.2),
    ("simple", "next_stage", 0, "start_epoch", 5),  # a global seen inside a stage
    ("simple", "next_stage", 1, "end_epoch", 15),
    ("simple", "next_stage", 1, "final_sparsity", 0.9),  # stage-local sparsity
    ("complex", "ac_dc_phase", None, "end_epoch_global", 100),  # the GLOBAL end_epoch
    ("complex", "ac_dc_phase", None, "end_epoch", 75),
    ("complex", "ac_dc_phase", 0, "end_epoch", 100),  # eval(end_epoch_global)
    ("complex", "ac_dc_phase", 1, "final_lr", 0.256),  # stage final_lr shadows global 0.0
    ("complex", "ac_dc_phase", 1, "init_lr", 0.05),  # global init_lr
    ("complex", "ac_dc_phase", 2, "lr_func", "cosine"),  # eval(lr_func) gives the string
    ("complex", "ac_dc_phase", 3, "compression_sparsity", 0.5),  # stage shadows global 0.9
    ("complex", "ac_dc_phase", 3, "end_epoch", 75),  # stage end_epoch inside a modifier
    ("complex", "ac_dc_phase", 3, "update_frequency", 5),
    ("complex", "ac_dc_phase", 3, "global_sparsity", False),
    ("complex", "next_stage", 0, "start_epoch", 15.0),  # start_epoch + new_num_epochs
    ("complex", "next_stage", 0, "end_epoch", 100),  # global: next_stage has no end_epoch
    ("complex", "next_stage", 1, "final_sparsity", 0.9),  # global sparsity
]


@pytest.mark.parametrize("which,stage,index,key,expected", C02_VALUES)
def test_c02_stage_scoping(which: str, stage: str, index: int | None, key: str,
                           expected: Any) -> None:
    """C-02: stage variables shadow globals inside that stage's modifiers; inside the stage's
    own variable definitions `eval(end_epoch)` is the global value; the other stage sees the
    globals."""
    r = load(STAGED_RECIPE_SIMPLE if which == "simple" else complex_recipe())
    s = r.stage(stage)
    value = s.variables[key] if index is None else s.modifiers[index].args[key]
    assert value == expected
    assert type(value) is type(expected)


def test_c02_stage_variable_reading_global_warns() -> None:
    """C-02: `end_epoch_global: eval(end_epoch)` resolves to the global 100 although the stage
    says `end_epoch: 75` (SparseML's rule, kept); recipe-spec adds warning V006 at the name."""
    r = load(complex_recipe())
    assert where(r.warnings) == [("V006", 13, 26)]
    assert r.warnings[0].severity == "warning"
    assert "100" in r.warnings[0].message and "75" in r.warnings[0].message


@pytest.mark.parametrize(
    "recipe,staged",
    [
        (RECIPE_SIMPLE_EVAL, False),
        (TARGET_RECIPE.format(num_epochs=10.0), False),
        (STAGED_RECIPE_SIMPLE, True),
        (complex_recipe(), True),
    ],
)
def test_c02_check_if_staged_recipe(recipe: str, staged: bool) -> None:
    """C-02: `check_if_staged_recipe` is `Recipe.staged`."""
    r = load(recipe)
    assert r.staged is staged
    assert [s.name is None for s in r.stages] == ([False, False] if staged else [True])


C03_INVALID = [
    # (recipe, code, line, column, text in the message or hint)
    ("val_1: eval(val_2)\nval_2: eval(val_1)\n", "V002", 1, 8, "val_1 -> val_2 -> val_1"),
    ("val_1: eval(val2)\n", "V001", 1, 13, "Did you mean 'val_1'?"),
    ("val_1: eval([1,2])\n", "V003", 1, 13, "lists not allowed"),
]


@pytest.mark.parametrize("recipe,code,line,column,text", C03_INVALID, ids=["cycle", "undefined", "dtype"])
def test_c03_invalid_equations(recipe: str, code: str, line: int, column: int, text: str) -> None:
    """C-03: a cycle, an undefined name and a non-numeric expression are errors (SparseML:
    RuntimeError), each with its code and position. `modifiers: []` is appended so that the
    missing modifier list (S001) does not join in."""
    _, diagnostics = check(recipe + "modifiers: []\n")
    assert where(diagnostics) == [(code, line, column)]
    assert text in diagnostics[0].message + " " + diagnostics[0].hint
    with pytest.raises(RecipeError):
        load(recipe + "modifiers: []\n")


@pytest.mark.parametrize(
    "base,overrides,target",
    [
        (TARGET_RECIPE.format(num_epochs=100.0), {"num_epochs": 10.0},
         TARGET_RECIPE.format(num_epochs=10.0)),
        (
            complex_recipe(sparsity=0.9, num_epochs=10, lr_func="linear", new_num_epochs=15),
            {"sparsity": 0.5, "num_epochs": 11, "lr_func": "cosine", "new_num_epochs": 13},
            complex_recipe(sparsity=0.5, num_epochs=11, lr_func="cosine", new_num_epochs=13),
        ),
    ],
    ids=["plain", "staged"],
)
def test_c04_update_recipe_variables(base: str, overrides: dict[str, Any], target: str) -> None:
    """C-04: overrides reproduce the recipe written with those values, at top level and inside
    stages (`num_epochs` and `new_num_epochs` exist only in a stage; `sparsity` in both)."""
    updated = load(base, variables=overrides)
    expected = load(target)
    assert updated == expected
    assert evaluated_view(updated) == evaluated_view(expected)


def test_c04_override_reaches_expressions() -> None:
    """C-04: an override changes every expression that uses the variable."""
    r = load(RECIPE_SIMPLE_EVAL, variables={"num_epochs": 20})
    assert (r.variables["pruning_start_epoch"], r.variables["pruning_end_epoch"]) == (4.0, 16.0)
    assert r.modifiers[1].args["end_epoch"] == 16.0


def test_c04_staged_override_replaces_global_and_stage_values() -> None:
    """C-04 (SparseML [run]): overriding `end_epoch` replaced the global and the stage-local
    value alike."""
    r = load(complex_recipe(), variables={"end_epoch": 50})
    assert r.variables["end_epoch"] == 50
    stage = r.stage("ac_dc_phase")
    assert stage.variables["end_epoch"] == 50
    assert stage.variables["end_epoch_global"] == 50
    assert stage.modifiers[3].args["end_epoch"] == 50
    assert r.stage("next_stage").modifiers[0].args["end_epoch"] == 50


@pytest.mark.parametrize(
    "base,overrides,hint_text",
    [
        (TARGET_RECIPE.format(num_epochs=100.0), {"invalid_var_name": 10.0}, "Variables defined:"),
        (complex_recipe(), {"invalid_var_name": 10.0}, "Variables defined:"),
        (TARGET_RECIPE.format(num_epochs=100.0), {"num_epoch": 10.0},
         "Did you mean 'num_epochs'?"),
        (complex_recipe(), {"new_num_epoch": 3}, "Did you mean 'new_num_epochs'?"),
    ],
    ids=["plain", "staged", "did-you-mean", "did-you-mean-stage-variable"],
)
def test_c04_unknown_override_is_an_error(base: str, overrides: dict[str, Any],
                                          hint_text: str) -> None:
    """C-04: overriding a name the recipe does not define is an error (SparseML: ValueError),
    V005, with a did-you-mean when a defined name is close."""
    with pytest.raises(RecipeError) as info:
        load(base, variables=overrides)
    (d,) = info.value.diagnostics
    assert d.code == "V005"
    assert next(iter(overrides)) in d.message
    assert hint_text in d.hint


# --------------------------------------------------------------------------------------------
# B. Modifier objects / YAML
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag,expected_type",
    [
        ("!GMPruningModifier", "GMPruningModifier"),
        ("!pytorch.GMPruningModifier", "GMPruningModifier"),
        ("!keras.EpochRangeModifier", "EpochRangeModifier"),
        ("!tensorflow_v1.SetLearningRateModifier", "SetLearningRateModifier"),
    ],
)
@pytest.mark.parametrize("style", ["recipe", "sparseml"])
def test_c10_modifier_yaml_round_trip(tag: str, expected_type: str, style: str) -> None:
    """C-10: a modifier is written as `!ClassName` without any framework prefix, and loading
    that text gives one modifier of the same class with the same arguments."""
    r = loads(f"modifiers:\n  - {tag}\n    start_epoch: 0.0\n    end_epoch: 3.0\n")
    assert [m.type for m in r.modifiers] == [expected_type]
    text = r.to_yaml(style=style)
    assert f"- !{expected_type}\n" in text
    assert not re.search(r"!(pytorch|keras|tensorflow_v1)\.", text)
    again = loads(text)
    assert [m.type for m in again.modifiers] == [expected_type]
    assert dict(again.modifiers[0].args) == {"start_epoch": 0.0, "end_epoch": 3.0}


# --------------------------------------------------------------------------------------------
# C. Loading lists / groups / stages
# --------------------------------------------------------------------------------------------

SAMPLE_RECIPE = """
modifiers:
  - !EpochRangeModifier
    start_epoch: 0.0
    end_epoch: 1.0

  - !SetLearningRateModifier
    start_epoch: 0.0
    learning_rate: 0.1
"""

SAMPLE_GROUPED_RECIPE = """
training_modifiers:
  - !EpochRangeModifier
    start_epoch: 0.0
    end_epoch: 50.0

  - !SetLearningRateModifier
    start_epoch: 0.0
    learning_rate: 0.1

pruning_modifiers:
  - !GMPruningModifier
    start_epoch: 0
    end_epoch: 40
    init_sparsity: 0.05
    final_sparsity: 0.85
    params: __ALL__
    update_frequency: 0.5
"""

SAMPLE_STAGED_RECIPE = """
stage_1:
    training_modifiers:
      - !EpochRangeModifier
        start_epoch: 0.0
        end_epoch: 50.0

      - !SetLearningRateModifier
        start_epoch: 0.0
        learning_rate: 0.1

    pruning_modifiers:
      - !GMPruningModifier
        start_epoch: 0
        end_epoch: 40
        init_sparsity: 0.05
        final_sparsity: 0.85
        params: ["params.1", "params.2"]
        update_frequency: 0.5

      - !GMPruningModifier
        start_epoch: 0
        end_epoch: 40
        init_sparsity: 0.05
        final_sparsity: 0.95
        params: ["params.3"]
        update_frequency: 0.5

stage_2:
    training_modifiers:
      - !EpochRangeModifier
        start_epoch: 50.0
        end_epoch: 52.0

      - !SetLearningRateModifier
        start_epoch: 0.0
        learning_rate: 0.0001

    quantization_modifiers:
      - !QuantizationModifier
          start_epoch: 50.0
"""

SAMPLE_BAD_RECIPE = """
incorrect_modifier_list_name:
  - !EpochRangeModifier
    start_epoch: 0.0
    end_epoch: 1.0

  - !SetLearningRateModifier
    start_epoch: 0.0
    learning_rate: 0.1
"""


@pytest.mark.parametrize(
    "recipe,types,groups",
    [
        (SAMPLE_RECIPE, ["EpochRangeModifier", "SetLearningRateModifier"], ["modifiers"] * 2),
        (
            SAMPLE_GROUPED_RECIPE,
            ["EpochRangeModifier", "SetLearningRateModifier", "GMPruningModifier"],
            ["training_modifiers"] * 2 + ["pruning_modifiers"],
        ),
    ],
    ids=["modifiers", "groups"],
)
def test_c20_load_list(recipe: str, types: list[str], groups: list[str]) -> None:
    """C-20: one `modifiers:` list gives 2 modifiers; two groups are concatenated (3)."""
    r = load(recipe)
    assert [m.type for m in r.modifiers] == types
    assert [m.group for m in r.modifiers] == groups
    assert not r.staged


def test_c21_load_staged() -> None:
    """C-21: SAMPLE_STAGED_RECIPE gives {stage_1: 4, stage_2: 3}, in file order."""
    r = load(SAMPLE_STAGED_RECIPE)
    assert r.staged
    assert [(s.name, len(s.modifiers)) for s in r.stages] == [("stage_1", 4), ("stage_2", 3)]
    assert [[g.name for g in s.groups] for s in r.stages] == [
        ["training_modifiers", "pruning_modifiers"],
        ["training_modifiers", "quantization_modifiers"],
    ]
    assert all(m.stage == s.name for s in r.stages for m in s.modifiers)
    assert r.stage("stage_2").modifiers[2].args == {"start_epoch": 50.0}


@pytest.mark.parametrize(
    "recipe,expected",
    [
        (SAMPLE_BAD_RECIPE, [("S002", 3, 5)]),
        # the same list one level down, as a stage-like mapping without a modifiers key
        ("stage:\n  my_list:\n    - !EpochRangeModifier {start_epoch: 0, end_epoch: 1}\n",
         [("S002", 3, 7)]),
    ],
    ids=["top-level", "nested"],
)
def test_c22_load_list_fails(recipe: str, expected: list[tuple[str, int, int]]) -> None:
    """C-22: modifiers under a key without 'modifiers' in its name are an error whose message
    names 'modifiers' (SparseML: ValueError matching `.*'modifiers'.*`), at the misplaced
    modifier's line."""
    with pytest.raises(RecipeError, match=r".*'modifiers'.*") as info:
        load(recipe)
    assert where(info.value.diagnostics) == expected


# --------------------------------------------------------------------------------------------
# E. Manager serialization
# --------------------------------------------------------------------------------------------

STANDARD_RECIPE_1 = """
init_sparsity: 0.2
final_sparsity: 0.8
__metadata__:
  metadata: None
  level: 0

modifiers:
    - !EpochRangeModifier
        end_epoch: 3.0
        start_epoch: 0.0

    - !GMPruningModifier
        init_sparsity: eval(init_sparsity)
        final_sparsity: eval(final_sparsity)
        start_epoch: 0.0
        end_epoch: 3.0
        update_frequency: 1.0
        params: ["re:.*weight"]
        leave_enabled: True
        inter_func: cubic
        mask_type: unstructured
"""

# SparseML's str(manager) of STANDARD_RECIPE_1 (framework_metadata left out).
STANDARD_RECIPE_1_EVAL = """version: 1.1.0

__metadata__:
  metadata: None
  level: 0

modifiers:
    - !EpochRangeModifier
        end_epoch: 3.0
        start_epoch: 0.0

    - !GMPruningModifier
        end_epoch: 3.0
        final_sparsity: 0.8
        global_sparsity: False
        init_sparsity: 0.2
        inter_func: cubic
        leave_enabled: True
        mask_type: unstructured
        params: ['re:.*weight']
        start_epoch: 0.0
        update_frequency: 1.0
"""

STANDARD_RECIPE_2 = """
params: ["re:.*weight"]

training_modifiers:
    - !EpochRangeModifier
        end_epoch: 6.0
        start_epoch: 0.0

pruning_modifiers:
    - !ConstantPruningModifier
        start_epoch: 2.0
        end_epoch: 5.0
        params: eval(params)
"""


def test_c42_sparseml_style_layout() -> None:
    """C-42: `style="sparseml"` writes SparseML's str(manager) layout: `version: 1.1.0` first
    and a blank line, `__metadata__`, one `modifiers:` list indented 4/8 spaces, arguments in
    alphabetical order, evaluated values.

    SparseML also wrote every class default it knew (`global_sparsity: False`); recipe-spec's
    core has no class defaults, so only the arguments the recipe gives are written. Lists are
    written as YAML lists, not Python reprs: both read back the same."""
    text = load(STANDARD_RECIPE_1).to_yaml(style="sparseml")
    lines = text.splitlines()
    assert lines[:2] == ["version: 1.1.0", ""]
    assert sum(1 for line in lines if line.startswith("modifiers:")) == 1
    assert "    - !EpochRangeModifier" in lines and "    - !GMPruningModifier" in lines
    assert "eval(" not in text
    start = lines.index("    - !GMPruningModifier") + 1
    keys = [line.split(":")[0].strip() for line in lines[start:] if re.match(r" {8}\w", line)]
    assert keys == sorted(keys) == [
        "end_epoch", "final_sparsity", "init_sparsity", "inter_func", "leave_enabled",
        "mask_type", "params", "start_epoch", "update_frequency",
    ]
    ours = sparseml_classless(text)
    theirs = sparseml_classless(STANDARD_RECIPE_1_EVAL)
    theirs["modifiers"][1]["OBJECT.GMPruningModifier"].pop("global_sparsity")
    assert ours == theirs


@pytest.mark.parametrize(
    "recipe",
    [STANDARD_RECIPE_1, STANDARD_RECIPE_2, RECIPE_SIMPLE_EVAL, SAMPLE_GROUPED_RECIPE],
    ids=["standard-1", "standard-2", "simple-eval", "groups"],
)
def test_c42_sparseml_style_reads_the_same_in_sparseml(recipe: str) -> None:
    """C-42: SparseML (its classless regex + PyYAML, YAML 1.1) reads the `sparseml` form with
    exactly the evaluated values recipe-spec computed, all groups collapsed into one list."""
    r = load(recipe)
    parsed = sparseml_classless(r.to_yaml(style="sparseml"))
    assert list(parsed) == (["version", "__metadata__", "modifiers"] if r.metadata else
                            ["version", "modifiers"])
    assert parsed["version"] == "1.1.0"
    expected = [
        {f"OBJECT.{m.type}": {k: v for k, v in thaw(m.args).items() if k != "log_types"}}
        for m in r.modifiers
    ]
    assert parsed["modifiers"] == expected


@pytest.mark.parametrize(
    "recipe",
    [STAGED_RECIPE_SIMPLE, complex_recipe(), SAMPLE_STAGED_RECIPE],
    ids=["simple", "complex", "sample"],
)
def test_c42_sparseml_style_staged(recipe: str) -> None:
    """C-42: a staged recipe in SparseML's form: `version: 1.1.0`, then each stage with one
    `{stage}_modifiers:` list of evaluated modifiers and no stage variables."""
    r = load(recipe)
    text = r.to_yaml(style="sparseml")
    assert text.startswith("version: 1.1.0\n")
    parsed = sparseml_classless(text)
    assert list(parsed) == ["version", *(s.name for s in r.stages)]
    for stage in r.stages:
        assert list(parsed[stage.name]) == [f"{stage.name}_modifiers"]
        assert parsed[stage.name][f"{stage.name}_modifiers"] == [
            {f"OBJECT.{m.type}": thaw(m.args)} for m in stage.modifiers
        ]
    again = load(text)
    assert [(s.name, [thaw(m.args) for m in s.modifiers]) for s in again.stages] == [
        (s.name, [thaw(m.args) for m in s.modifiers]) for s in r.stages
    ]


ROUND_TRIP_RECIPES = {
    "simple-eval": RECIPE_SIMPLE_EVAL,
    "multi-eval": RECIPE_MULTI_EVAL,
    "metadata": RECIPE_SIMPLE_EVAL_W_METADATA,
    "staged-simple": STAGED_RECIPE_SIMPLE,
    "staged-complex": complex_recipe(),
    "staged-sample": SAMPLE_STAGED_RECIPE,
    "groups": SAMPLE_GROUPED_RECIPE,
    "standard-2": STANDARD_RECIPE_2,
}


@pytest.mark.parametrize("recipe", list(ROUND_TRIP_RECIPES.values()), ids=list(ROUND_TRIP_RECIPES))
def test_c43_staged_recipe_serialization(recipe: str) -> None:
    """C-43: `to_yaml()` reloads to an equal Recipe (stages, groups, variables and expressions
    as written); `to_yaml(evaluated=True)` inlines every value and keeps stages and groups."""
    r = load(recipe)
    assert load(r.to_yaml()) == r
    assert evaluated_view(load(r.to_yaml())) == evaluated_view(r)
    flat = r.to_yaml(evaluated=True)
    assert "eval(" not in flat
    again = load(flat)
    assert again.raw_variables == {}
    assert [(s.name, [g.name for g in s.groups]) for s in again.stages] == [
        (s.name, [g.name for g in s.groups]) for s in r.stages
    ]
    assert [typed(m.raw_args) for m in again.modifiers] == [typed(m.args) for m in r.modifiers]


RE_PATTERNS = [
    r"re:.*conv\d+\.weight",
    r"re:^features\.\d+\.(conv|bn)\.weight$",
    r"re:.*\\",
    r"re:model\.layers\.\d+\.mlp\.(gate|up)_proj\.weight",
]


@pytest.mark.parametrize("style,evaluated", [("recipe", False), ("recipe", True), ("sparseml", True)])
def test_c43_re_patterns_with_backslashes_round_trip(style: str, evaluated: bool) -> None:
    """C-42/C-43: `re:` patterns with backslashes come back unchanged from every form.

    SPEC deviation: SparseML's str(manager) doubled the backslashes (`re:.*conv\\\\d+`), so a
    saved recipe no longer matched its parameters. recipe-spec writes them once-escaped, and
    PyYAML (YAML 1.1, what SparseML used) reads every form back unchanged too."""
    listed = ", ".join("'" + p + "'" for p in RE_PATTERNS)
    r = loads(f"modifiers:\n  - !GMPruningModifier\n    params: [{listed}]\n")
    assert r.modifiers[0].args["params"] == tuple(RE_PATTERNS)
    text = r.to_yaml(evaluated=evaluated, style=style)
    assert load(text).modifiers[0].args["params"] == tuple(RE_PATTERNS)
    assert pyyaml_read(text)["modifiers"][0]["GMPruningModifier"]["params"] == RE_PATTERNS
    if style == "sparseml":
        parsed = sparseml_classless(text)
        assert parsed["modifiers"][0]["OBJECT.GMPruningModifier"]["params"] == RE_PATTERNS


# --------------------------------------------------------------------------------------------
# K. Where SPEC deviates from SparseML
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [("8e-5", 8e-5), ("2e-06", 2e-06), ("1e-7", 1e-7), ("1.e-6", 1e-6), (".5", 0.5), ("1E3", 1000.0)],
)
def test_k_yaml12_exponent_floats_are_numbers(text: str, expected: float) -> None:
    """K: `8e-5` is a float (YAML 1.2). SparseML used PyYAML (YAML 1.1), which read `8e-5`,
    `2e-06` and `1e-7` as strings, so `eval(init_lr * 2)` failed with UnknownVariableException;
    SPEC: "Floats follow YAML 1.2"."""
    r = loads(
        f"init_lr: {text}\nmodifiers:\n  - !SetLearningRateModifier\n"
        f"    learning_rate: eval(init_lr * 2)\n    start_epoch: 0\n"
    )
    assert r.variables["init_lr"] == expected and type(r.variables["init_lr"]) is float
    assert r.modifiers[0].args["learning_rate"] == expected * 2


@pytest.mark.parametrize(
    "expr,expected",
    [("-1", -1), ("abs(-3)", 3), ("-x", -2.5), ("+x", 2.5), ("-(x * 2) + 10", 5.0), ("- -x", 2.5)],
)
def test_k_unary_minus_works(expr: str, expected: float) -> None:
    """K: unary minus. SparseML's restricted_eval listed `ast.USub` but evaluated `node.left`
    instead of `node.operand`, so `eval(-1)` and `abs(-3)` raised AttributeError; SPEC: unary
    `+`/`-` work."""
    r = loads(f"x: 2.5\ny: eval({expr})\nmodifiers: []\n")
    assert r.variables["y"] == expected


def _with_duplicate_final_lr(text: str) -> str:
    return text.replace("  final_lr: 0.256\n", "  final_lr: eval(final_lr)\n  final_lr: 0.256\n")


@pytest.mark.parametrize(
    "recipe,expected,first_line",
    [
        # upstream STAGED_RECIPE_COMPLEX: `final_lr: eval(final_lr)` then `final_lr: 0.256`
        (_with_duplicate_final_lr(complex_recipe()), [("Y002", 18, 3)], 17),
        # upstream TARGET_RECIPE: `pruning_start_epoch: 2.0` again as its last line
        (TARGET_RECIPE.format(num_epochs=10.0) + "pruning_start_epoch: 2.0\n",
         [("Y002", 25, 1)], 4),
    ],
    ids=["staged-complex-final_lr", "target-pruning_start_epoch"],
)
def test_k_duplicate_keys_are_errors(recipe: str, expected: list[tuple[str, int, int]],
                                     first_line: int) -> None:
    """K / C-02: SparseML's own test recipes contain duplicate keys, which PyYAML resolved by
    silently keeping the last (C-02 expected `final_lr` 0.256). SPEC: "A key given twice in one
    mapping is an error", Y002 at the second key, naming the first's line."""
    _, diagnostics = check(recipe)
    assert where(diagnostics) == expected
    assert f"first on line {first_line}" in diagnostics[0].message


@pytest.mark.parametrize(
    "item",
    [
        "- !EpochRangeModifier {start_epoch: 0.0, end_epoch: 1.5}",
        "- !EpochRangeModifier {end_epoch: 1.5, start_epoch: 0.}",
        "- !EpochRangeModifier   # a comment. With a dot.\n    start_epoch: 0.0\n    end_epoch: 1.5",
    ],
    ids=["flow", "flow-trailing-dot", "comment-with-dot"],
)
def test_k_tag_followed_by_dot_on_its_line(item: str) -> None:
    """K: a tag followed by a `.` on the same line. SparseML's tag regex had the look-ahead
    `(?!.*\\.)`, so such a tag was not rewritten and loading failed with ConstructorError;
    SPEC: flow style works."""
    r = loads(f"modifiers:\n  {item}\n")
    assert [(m.type, dict(m.args)) for m in r.modifiers] == [
        ("EpochRangeModifier", {"start_epoch": 0.0, "end_epoch": 1.5})
    ]
    assert r.modifiers[0].span.line == 2


@pytest.mark.parametrize(
    "recipe,key_position",
    [
        ("modifiers:\n  - GMPruningModifier: {init_sparsity: 0.05, final_sparsity: 0.8}\n",
         (2, 46)),
        ("modifiers:\n  - GMPruningModifier:\n      init_sparsity: 0.05\n      final_sparsity: 0.8\n",
         (4, 7)),
    ],
    ids=["flow", "block"],
)
def test_k_tag_free_one_key_form(recipe: str, key_position: tuple[int, int]) -> None:
    """K: SPEC accepts the tag-free one-key form `- GMPruningModifier: {...}` as the same
    modifier as `- !GMPruningModifier` (SparseML would have treated it as a plain dict and
    found no modifier)."""
    tagged = loads(
        "modifiers:\n  - !GMPruningModifier {init_sparsity: 0.05, final_sparsity: 0.8}\n"
    )
    r = loads(recipe)
    assert r == tagged
    assert r.modifiers[0].type == "GMPruningModifier"
    assert r.modifiers[0].span.line == 2
    span = r.modifiers[0].key_span("final_sparsity")
    assert (span.line, span.column) == key_position


def test_k_yml_suffix_is_accepted(tmp_path: Any) -> None:
    """K: SparseML refused `.yml` ("Unsupported file extension"); SPEC lists `.yml`."""
    path = tmp_path / "recipe.yml"
    path.write_text(RECIPE_SIMPLE_EVAL)
    assert evaluated_view(load(path)) == evaluated_view(load(RECIPE_SIMPLE_EVAL))
    assert load(str(path)).path == str(path)
