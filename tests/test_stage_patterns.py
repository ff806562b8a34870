"""Regex pitfalls in a stage/group recipe's ``targets``/``ignore``, found by ``validate``
without a model: each user complaint of the stage/group dialect's reference notes
(../shared/reference/core-dialect.md, section 4, rule 10 of its quick list) gives a located diagnostic whose hint says what to write."""

from __future__ import annotations

import re

import pytest

from recipe_spec.stage_dialect.pattern_checks import pattern_findings, pattern_items
from recipe_spec.validation import validate

HEAD = "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
PATTERN_CODES = ("P005", "P008", "P009")


def found(text: str) -> list[tuple[str, str, int, int, str, str]]:
    return [(d.code, d.severity.value, d.line, d.column, d.message, d.hint)
            for d in validate(text) if d.code in PATTERN_CODES or d.code.startswith("Y")]


def ignore(*items: str) -> str:
    """A recipe whose ignore list holds ``items`` as written, one per line from line 6."""
    return HEAD + "      ignore:\n" + "".join(f"        - {i}\n" for i in items)


def test_missing_re_prefix() -> None:
    """PR #2803: ``backbone\\.embeddings`` and ``.*lm_head`` without ``re:`` are compared as
    plain names and match nothing."""
    out = found(ignore(r"'backbone\.embeddings'", "'.*lm_head'"))
    assert [d[:4] for d in out] == [("P008", "warning", 6, 11), ("P008", "warning", 7, 11)]
    assert "no 're:' prefix" in out[0][4]
    assert r"'re:backbone\.embeddings'" in out[0][5]
    assert "'re:.*lm_head'" in out[1][5]


def test_unescaped_dots() -> None:
    """PR #2803: ``re:.*mixer.gate\\..*`` (a slip: the next dot is escaped, so a warning) and
    ``re:mtp.layers.*`` (an info: looser than meant, seldom wrong in a real model)."""
    out = found(ignore(r"'re:.*mixer.gate\..*'", "'re:mtp.layers.*'"))
    assert [d[:4] for d in out] == [("P009", "warning", 6, 11), ("P009", "info", 7, 11)]
    assert "after 'mixer'" in out[0][4]
    assert r"'re:.*mixer\.gate\..*'" in out[0][5]
    assert r"'re:mtp\.layers.*'" in out[1][5]


def test_double_quoted_backslashes() -> None:
    """#1230: in YAML double quotes ``\\.`` is an escape error (Y001, whose hint now says to
    use single quotes) and ``\\b`` silently becomes a backspace; ``\\\\d`` is fine."""
    unknown = found(ignore(r'"re:model\.layers"'))
    assert [d[:3] for d in unknown] == [("Y001", "error", 6)]
    assert "single quotes" in unknown[0][5]
    out = found(ignore(r'"re:.*\bproj"', r'"re:.*layers\\.\\d+$"', r'"re:.*\x2eproj"'))
    assert [d[:4] for d in out] == [("P008", "warning", 6, 11), ("P008", "warning", 8, 11)]
    assert "backspace" in out[0][4]
    assert r"'re:.*\bproj'" in out[0][5] and "single quotes" in out[0][5]
    assert r"'re:.*\x2eproj'" in out[1][5]


def test_python_double_backslash_in_single_quotes() -> None:
    """#1230, the other way round: ``\\\\.`` copied from Python into single quotes asks for a
    literal backslash in the module name."""
    out = found(ignore(r"'re:model\\.layers\\.\\d+$'"))
    assert [d[:4] for d in out] == [("P008", "warning", 6, 11)]
    assert r"'re:model\.layers\.\d+$'" in out[0][5]


def test_bad_regex_is_located() -> None:
    """#1428 ("regex match error"): a pattern Python's ``re`` refuses is a P005 error at the
    string, with the fix; ``re:.*lm_head`` itself compiles and is not reported."""
    out = found(ignore("'re:*lm_head'", "'re:.*lm_head'", "'re:conv[0-9'"))
    assert [d[:4] for d in out] == [("P005", "error", 6, 11), ("P005", "error", 8, 11)]
    assert "nothing to repeat" in out[0][4] and "'re:.*lm_head'" in out[0][5]
    assert "'re:conv[0-9]'" in out[1][5]
    flow = found(HEAD + "      targets: ['re:(?P<x>a', Linear]\n")
    assert [d[:4] for d in flow] == [("P005", "error", 5, 17)]


def test_re_match_is_anchored_at_the_start() -> None:
    """vLLM #48508: ``re:`` is ``re.match``, from the start of the full module name, so a
    pattern (or a plain name) that begins inside a layer matches nothing. ``re:lm_head`` is
    left alone: ``lm_head`` sits at the root of most models."""
    out = found(ignore("'re:mlp.down_proj'", "q_proj", "'re:lm_head'", "'re:model.layers.0'"))
    assert [d[:4] for d in out[:2]] == [("P008", "warning", 6, 11), ("P008", "warning", 7, 11)]
    assert "re.match" in out[0][4]
    assert r"'re:.*mlp\.down_proj'" in out[0][5]
    assert "'re:.*q_proj$'" in out[1][5]
    assert [d[:4] for d in out[2:]] == [("P009", "info", 9, 11)]  # only its loose dots


@pytest.mark.parametrize("pattern", [
    r"'re:.*mixer\.gate\..*'", "lm_head", "Linear", r"'re:.*\.mlp\.down_proj$'", "__ALL__",
    "model.layers.0.mlp.down_proj", r"'re:.*linear_attn\.in_proj_a$'", r'"re:.*\\d"',
    "'re:vision_tower.*'", "LlamaRMSNorm", "'re:.*[a.b]x'",
])
def test_correct_patterns_give_no_finding(pattern: str) -> None:
    assert found(ignore(pattern)) == []


def test_every_target_like_argument_is_inspected() -> None:
    text = ("smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n"
            "      mappings: [[['re:.*q_proj'], '.*input_layernorm']]\n"
            "    GPTQModifier:\n      config_groups:\n        g:\n          targets: ['q_proj']\n"
            "          weights: {num_bits: 4}\n      ignore: ['re:lm_head']\n")
    assert [d[:4] for d in found(text)] == [("P008", "warning", 4, 36), ("P008", "warning", 8, 21)]
    keys = [k for k, _, _ in pattern_items({"scheme": {"W4A16": ("a", "b")}, "block_size": "x"})]
    assert keys == [("scheme", "W4A16", 0), ("scheme", "W4A16", 1)]
    # AWQ matches balance layers among the smooth layer's parent's submodules: a name that
    # begins inside a layer is fine there.
    awq = [(k, root) for k, _, root in pattern_items({"mappings": ({"balance_layers": ("re:q_proj",)},)})]
    assert awq == [(("mappings", 0, "balance_layers", 0), False)]
    assert pattern_findings("re:q_proj", from_root=False) == ()


def test_hints_are_valid_patterns() -> None:
    """What a hint proposes compiles and gets no finding of its own."""
    for text in ("re:mlp.down_proj", ".*lm_head", "re:.*mixer.gate\\..*", "q_proj", "re:*lm_head",
                 "re:model.layers.\\d+$"):
        hint = pattern_findings(text)[0].hint
        proposed = re.search(r"'((?:[^']|'')*)'", hint).group(1).replace("''", "'")
        assert proposed.startswith("re:") and re.compile(proposed[3:])
        assert pattern_findings(proposed) == (), (text, proposed)
