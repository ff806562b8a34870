"""The event reader (libyaml's events, one pass) gives exactly what the node-graph reader
(PyYAML's pure-Python composer) gives: the same values with the same types, the same
location for every path, the same diagnostics, on every corpus text, on hand-written edge
cases and on fuzzed ones."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import yaml
from fuzz_inputs import corpus_texts, make_input

from recipe_spec.diagnostics import RecipeError
from recipe_spec.text.frozen import FrozenDict
from recipe_spec.text.nodes import Tagged
from recipe_spec.text.reader import read_yaml, read_yaml_nodes
from recipe_spec.text.source import from_text
from recipe_spec.text.stream import CParser, Fallback, read_events

pytestmark = pytest.mark.skipif(CParser is None, reason="PyYAML without libyaml")

TEXTS = corpus_texts()

EDGE_CASES = [
    "a: 1\nb: 0x1f\nc: 0o17\nd: -.inf\ne: .nan\nf: true\ng: ~\nh: null\ni: '1'\nj: 1.5e3\n",
    "base: &b {start_epoch: 0, end_epoch: 5}\nmodifiers:\n  - !GMPruningModifier\n    <<: *b\n    params: x\n",
    "x: &a [1, 2, {y: 3}]\ny: *a\nz: [*a, *a]\n",
    "m: &t !EpochRangeModifier {end_epoch: 2}\nmodifiers: [*t, *t]\n",
    "a: 1\na: 2\nb: {c: 1, c: 2}\n",
    "[1, 2]: x\n{a: b}: y\nok: 1\n",
    "k: &k key\n*k : v\n",
    "a: !!int x\nb: !!float y\nc: !!bool maybe\nd: !!str 5\ne: !!binary AAAA\nf: !!set {a}\n",
    "a: !local x\nb: ! 5\nc: !Tagged\nd: !Tagged ''\ne: !T [1]\nf: !T {a: 1}\n",
    "<<: {a: 1}\nb: 2\n",
    "<<: [{a: 1}, {b: 2}]\nc: 3\n",
    "m: &m {a: 1}\nn:\n  <<: [*m, {b: 2}]\n  a: 9\n",
    "<<: 5\n",
    "m:\n  <<: {a: 1, c: 4}\n  <<: {a: 2, b: 3}\n  d: 5\n",
    "m:\n  <<: [1, 2]\n  <<: [3]\n",
    "!!merge <<: {a: 1}\n",
    "? |\n  block\n: v\n'quoted': \"double\"\n",
    "1: one\n1.5: f\ntrue: t\nnull: n\n",
    "modifiers:\n  - !GMPruningModifier\n  - !LearningRateModifier {init_lr: .1}\n",
    "- a\n- [b, c]\n- {d: e}\n",
    "plain text\n",
    "",
    "# only a comment\n",
    "a: b\n---\nc: d\n",
    "a: *missing\n",
    "a: &x 1\nb: &x 2\n",
    "a: [1, 2\n",
    "a: 'é \\u202e'\nb: \"\\x00\"\n",
    "x: &r [*r]\n",
    "a: &x 1\nb: *y\nc: &x 2\n",
    "a: *y\nb: [1, 2\n",
    "a: &x 1\nb: &x 2\n---\nc: 3\n",
    "[" * 300 + "]" * 300,
    "a: *y\n" + "[" * 300 + "]" * 300,
    "a: b",
    "a:",
    "- x\n- y",
    "a:\n  b: [1]",
    "a: |\n  x",
    "a: b  # c",
    "a: b\r\nc: d",
    "a: b\u2028c: d",
    "m:\n  - !GMPruningModifier\n    params: x",
]


def canon(value: Any) -> Any:
    """``value`` with every type spelled out (True, 1 and 1.0 are equal in Python)."""
    if isinstance(value, FrozenDict):
        return ("map", tuple((canon(k), canon(v)) for k, v in value.items()))
    if isinstance(value, tuple):
        return ("seq", tuple(canon(v) for v in value))
    if isinstance(value, Tagged):
        return ("tag", value.tag, canon(value.value), value.span)
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, repr(value))


def outcome(reader: Any, text: str) -> Any:
    try:
        doc = reader(text, 3)
    except RecipeError as exc:
        return ("error", [repr(d) for d in exc.diagnostics])
    return ("doc", canon(doc.value), sorted(((repr(k), v) for k, v in doc.locs.items()), key=repr))


def assert_same(text: str) -> None:
    try:
        read_events(text)
    except Fallback:
        return  # read_yaml gives such texts to the node-graph reader itself
    except yaml.YAMLError as exc:
        if "nesting deeper" in str(exc):
            # stops at the first node too deep, before reading on (the pure-Python reader
            # may report a later problem first, as a character it checks up front)
            assert outcome(read_yaml_nodes, text)[0] == "error"
            return
    nodes = outcome(read_yaml_nodes, text)
    if nodes[0] == "error" and "found character '\\\\t' that cannot start any token" in nodes[1][0]:
        return  # PyYAML's pure-Python scanner refuses a tab after "key:" (libyaml and YAML allow it)
    assert outcome(read_yaml, text) == nodes
    if nodes[0] == "doc":  # each location looked up on its own, before the table is read whole
        fresh, reference = read_yaml(text, 3).locs, read_yaml_nodes(text, 3).locs
        for path, loc in reference.items():
            assert path in fresh and fresh.get(path) == loc == fresh[path], path
        assert fresh.get(("no such key",)) is None and ("no such key",) not in fresh


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_read_the_same(text: str) -> None:
    assert_same(text)


def test_every_corpus_text_reads_the_same() -> None:
    for text in TEXTS:
        assert_same(from_text(text).yaml_text)


def test_fuzzed_texts_read_the_same() -> None:
    rnd = random.Random(20261125)
    for _ in range(400):
        assert_same(make_input(rnd, TEXTS))


def test_the_comparison_can_fail() -> None:
    """The event reader hands back what only the pure-Python reader explains well."""
    with pytest.raises(Fallback):
        read_events("a: [1, 2\n")
    assert outcome(read_yaml, "a: 1\n") != outcome(read_yaml, "a: 2\n")
