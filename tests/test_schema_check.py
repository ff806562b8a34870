"""The fast schema pre-check agrees with jsonschema: on every corpus modifier, on every
schema example, and on randomly broken variants of them."""

from __future__ import annotations

from conftest import corpus_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import recipe_spec
from recipe_spec.checks.arguments import _jsonable
from recipe_spec.checks.schema_check import fast_is_valid
from recipe_spec.checks.schemas import modifier_names, modifier_schema

SAMPLES: list[tuple[str, dict]] = []
for row in corpus_rows():
    recipe, _ = recipe_spec.check(row["path"])
    if recipe is not None:
        SAMPLES.extend(
            (m.type, _jsonable(m.args)) for m in recipe.modifiers if m.type in modifier_names()
        )
for name in modifier_names():
    SAMPLES.append((name, modifier_schema(name)["x-recipe-spec"]["example"]))


def _agree(name: str, instance: object) -> None:
    fast = fast_is_valid(modifier_schema(name), instance)
    slow = Draft202012Validator(modifier_schema(name)).is_valid(instance)
    assert fast is None or fast == slow, (name, instance, fast, slow)


def test_agrees_on_every_corpus_modifier_and_example() -> None:
    decided = 0
    for name, args in SAMPLES:
        _agree(name, args)
        decided += fast_is_valid(modifier_schema(name), args) is not None
    assert len(SAMPLES) > 3000 and decided == len(SAMPLES)


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False),
    st.sampled_from(["", "cubic", "2:4", "unstructured", "__ALL__", "re:.*", "yes", "StepLR"]),
    st.lists(st.one_of(st.integers(-1, 8), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.sampled_from(["0", "0.5", "x", "milestones", "gamma"]), st.integers(0, 3), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(SAMPLES) - 1), st.data())
def test_agrees_on_broken_variants(index: int, data: st.DataObject) -> None:
    name, args = SAMPLES[index]
    variant = dict(args)
    props = list(modifier_schema(name)["properties"])
    key = data.draw(st.sampled_from(props + ["bogus_key"]))
    if data.draw(st.booleans()) and key in variant:
        del variant[key]
    else:
        variant[key] = data.draw(VALUES)
    _agree(name, variant)
