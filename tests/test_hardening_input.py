"""Hostile input (issue 14, items 1, 3 and 9): deep nesting hidden behind a quote, text over
the size cap given to ``loads()``, and regexes that make a backtracking engine hang. Each ends
fast, in a located diagnostic or a correct answer."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from timing import cpu_time

import recipe_spec
from recipe_spec.diagnostics import RecipeError, Severity
from recipe_spec.lint import lint
from recipe_spec.params import ParamRecord, PatternError, compile_pattern, resolve
from recipe_spec.text.reader import read_yaml
from recipe_spec.text.source import MAX_BYTES


def _timed(fn, *args, limit: float = 1.0):
    start = cpu_time()
    result = fn(*args)
    elapsed = cpu_time() - start
    assert elapsed < limit, f"took {elapsed:.2f} s"
    return result


# --------------------------------------------------------------------------------------------
# 1. Nesting: settled by YAML's own tokens before any parser, quotes or not
# --------------------------------------------------------------------------------------------


def quote_trick(levels: int) -> str:
    return "a: [x'y, " + "[" * levels + "]" * levels + "]  # '\nmodifiers: []\n"


@pytest.mark.parametrize("levels", [65, 300, 1_000, 50_000])
def test_deep_nesting_behind_a_quote_is_y004_located(levels: int) -> None:
    recipe, diagnostics = _timed(recipe_spec.check, quote_trick(levels))
    assert recipe is None
    (d,) = diagnostics
    # root mapping 1, the outer list 2, so the 63rd inner '[' (column 9 + 63) is level 65
    assert (d.code, d.line, d.column) == ("Y004", 1, 72)


@pytest.mark.parametrize("levels", [65, 300, 1_000, 50_000])
def test_deep_nesting_without_a_quote(levels: int) -> None:
    text = "modifiers: []\nx: " + "[" * levels + "]" * levels + "\n"
    recipe, diagnostics = _timed(recipe_spec.check, text)
    assert [(d.code, d.line, d.column) for d in diagnostics] == [("Y004", 2, 67)]


def test_the_quote_trick_within_the_limit_is_read_right() -> None:
    value = recipe_spec.loads(quote_trick(62)).variables["a"]
    assert value[0] == "x'y"  # a plain scalar may hold a quote
    inner = value[1]
    for _ in range(61):
        (inner,) = inner
    assert inner == ()


@pytest.mark.parametrize(
    "make",
    [
        lambda k: "x: " + "[a: " * k + "1" + "]" * k + "\n",  # single-pair mappings
        lambda k: "x: " + "{a: " * k + "1" + "}" * k + "\n",
        lambda k: "a:\n" + "".join("  " * i + f"- a{i}:\n" for i in range(k)) + "  " * k + "- z\n",
        lambda k: "x:\n" + "- " * k + "1\n",
        lambda k: "".join("  " * i + "a:\n" for i in range(k)) + "  " * k + "1\n",
        lambda k: "b: &b 1\nx: " + "{a: " * k + "*b" + "}" * k + "\n",
    ],
    ids=["flow-pairs", "flow-maps", "indentless", "dashes", "block-maps", "alias"],
)
def test_the_depth_limit_is_exact(make) -> None:
    """The scanner counts exactly what the composer counts: the deepest accepted text has
    MAX_DEPTH levels, one more is refused, whichever kind of nesting."""
    outcomes = []
    for k in range(1, 80):
        try:
            read_yaml(make(k))
            outcomes.append(True)
        except RecipeError as exc:
            assert [d.code for d in exc.diagnostics] == ["Y004"]
            outcomes.append(False)
    first_refused = outcomes.index(False)
    assert all(outcomes[:first_refused]) and not any(outcomes[first_refused:])


def test_the_cli_refuses_the_quote_trick_with_exit_1(tmp_path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(quote_trick(50_000))
    start = cpu_time()
    done = subprocess.run(
        [sys.executable, "-m", "recipe_spec", "validate", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{path}:1:72: Y004" in done.stdout
    assert "internal error" not in done.stdout + done.stderr
    assert cpu_time() - start < 30  # the interpreter's start-up included


# --------------------------------------------------------------------------------------------
# 9. The size cap covers text as well as files
# --------------------------------------------------------------------------------------------

BIG = "modifiers: []\n" + "x: 1\n" * 12_000_000  # 60 MB


@pytest.mark.parametrize("entry", ["loads", "load", "check", "read_yaml"])
def test_60_mb_of_text_is_refused_at_once(entry) -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = cpu_time()
    if entry == "check":
        recipe, diagnostics = recipe_spec.check(BIG)
        assert recipe is None
    else:
        fn = {"loads": recipe_spec.loads, "load": recipe_spec.load, "read_yaml": read_yaml}[entry]
        with pytest.raises(RecipeError) as info:
            fn(BIG)
        diagnostics = info.value.diagnostics
    assert cpu_time() - start < 1.0
    (d,) = diagnostics
    assert (d.code, d.line, d.column) == ("Y007", 1, 1)
    assert "at most 2 MiB" in d.message
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 1024 * 1024  # ru_maxrss is in KiB on Linux


def test_the_cap_counts_utf8_bytes_not_characters() -> None:
    body = "é" * (MAX_BYTES // 2 + 10)  # fewer characters than MAX_BYTES, more bytes
    with pytest.raises(RecipeError) as info:
        recipe_spec.loads(f"x: '{body}'\nmodifiers: []\n")
    assert info.value.diagnostics[0].code == "Y007"
    recipe_spec.loads(f"x: '{'é' * 1000}'\nmodifiers: []\n")  # a small one still loads


# --------------------------------------------------------------------------------------------
# 3. Parameter patterns run in linear time, with re.match semantics
# --------------------------------------------------------------------------------------------

BERT = "bert.encoder.layer.11.attention.output.dense.weight"
assert len(BERT) == 51
LONG_NAMES = ["a" * 500, "a" * 499 + "x", "a" * 250 + "." + "a" * 249, ("ab" * 250)[:500]]
HOSTILE = [
    r"(.|.)*X",
    r"(a|a)*$",
    r"(a|aa)+$",
    r"(.*a){12}x",
    r"(a{1,100}){1,100}$",
    ".*" * 12 + "X",
    ".*" * 12 + "x",
    r"(a+)+$",
    r"(a*)*b",
    r"(\w|\d)+\.$",
]


def _expected(pattern: str, name: str) -> bool | None:
    """Python re's answer, where Python re can give it quickly (short names or matches)."""
    if len(name) <= 20:
        return re.match(pattern, name) is not None
    return None


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_patterns_resolve_fast(pattern: str) -> None:
    names = [BERT, *LONG_NAMES]
    records = [ParamRecord(n, (4, 4), "Linear", True) for n in names]
    start = cpu_time()
    try:
        compiled = compile_pattern("re:" + pattern)
    except PatternError as exc:
        assert "states" in exc.message  # only counted repetition too large to write out
        return
    result = resolve("re:" + pattern, records)
    assert cpu_time() - start < 1.0
    for name in names:
        assert compiled.match(name) == (name in result.names)


def test_hostile_patterns_answer_right() -> None:
    assert compile_pattern(r"re:(a|aa)+$").match("a" * 500)
    assert not compile_pattern(r"re:(a|aa)+$").match("a" * 499 + "x")
    assert compile_pattern(r"re:(.*a){12}x").match("a" * 499 + "x")
    assert not compile_pattern(r"re:(.*a){12}x").match("a" * 500)
    assert compile_pattern("re:" + ".*" * 12 + "x").match("a" * 499 + "x")
    assert not compile_pattern(r"re:(.|.)*X").match(BERT)
    assert compile_pattern(r"re:(.|.)*weight").match(BERT)


def _gmp_with(pattern: str) -> str:
    """A GMP recipe selecting ``re:<pattern>`` on line 3."""
    return (
        "modifiers:\n"
        "  - !GMPruningModifier\n"
        f"    params: ['re:{pattern}']\n"
        "    init_sparsity: 0.05\n    final_sparsity: 0.8\n"
        "    start_epoch: 0\n    end_epoch: 10\n    update_frequency: 1\n"
    )


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_patterns_lint_fast_and_located(pattern: str) -> None:
    records = [ParamRecord(BERT, (768, 768), "Linear", True)] + [
        ParamRecord(n, (4, 4), "Linear", True) for n in LONG_NAMES
    ]
    text = _gmp_with(pattern)
    diagnostics = _timed(lint, text, records, "torch")
    for d in diagnostics:
        assert d.line == 3 and d.column > 1  # located at the selector
        assert d.code in ("P001", "P005", "P002", "P003", "P004") or d.severity is not Severity.ERROR


@pytest.mark.parametrize(
    "pattern, what",
    [(r"(a)\1", "backreference"), (r"fc(?!2)", "lookahead"), (r"(?<=x)y", "lookahead or lookbehind")],
)
def test_backtracking_only_constructs_are_a_located_p005(pattern: str, what: str) -> None:
    text = _gmp_with(pattern)
    from recipe_spec.validation import validate

    found = [d for d in validate(text) if d.code == "P005"]
    assert found and found[0].line == 3, found
    assert what in found[0].message


@pytest.mark.parametrize(
    "pattern",
    [
        r".*conv\d+\.weight", r"^features\.\d+\.(conv|bn)\.weight$", r"(?i)FC\d\.WEIGHT",
        r"layer[1-3]\..*(?<!x)", r"\bfc", r"fc1/.*", r"[^.]+\.weight$", r"(?i:Fc)1.*?",
        r"fc(1|2)?\.b.*", r"fc1\.weight\Z", r"(?s).*bias", r"fc\d{1,2}\.",
    ],
)
def test_same_answers_as_python_re(pattern: str) -> None:
    names = ["fc1.weight", "fc1.bias", "FC2.Weight", "features.0.conv.weight", "features.12.bn.weight",
             "layer2.0.conv1.weight", "fc1/kernel", "a.b.weight", "fc12.x", "fc1.weight\n", "x_fc1"]
    try:
        compiled = compile_pattern("re:" + pattern)
    except PatternError:
        assert "(?<!" in pattern
        return
    for name in names:
        assert compiled.match(name) == (re.match(pattern, name) is not None), name
