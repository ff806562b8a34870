"""One linear-time matcher for the ``re:`` patterns of one-shot recipes
(:mod:`recipe_spec.text.targets`), shared by ``validate``, ``lint --model``, the cost
estimate and the run on both backends.

- it agrees with Python's ``re.match`` (compressed-tensors' semantics) on ordinary patterns;
- patterns with nested repetition (``re:(a+)+$``), which make a backtracking engine run for
  hours on a long name, finish at once on every surface: the matcher itself, ``oneshot()`` on
  PyTorch (a tiny Llama, and a model with long module names) and on Keras, the
  ``recipe-spec oneshot`` command (its estimate and run: ``test_oneshot_cli.py``) and
  ``recipe-spec lint --model``;
- a pattern the matcher cannot run (a backreference, lookaround) is refused by ``validate``
  at its line and column (P005), and by ``oneshot()`` with the same error before the model
  is touched.

A surface that backtracks would hang: each runs under a deadline (``SIGALRM``), far above
what it needs."""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from recipe_spec.cli import main
from recipe_spec.text.targets import linear_pattern, regex_match, target_matches
from recipe_spec.validation import validate

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Nested repetition: exponential time in a backtracking engine on a name that fails late.
HOSTILE = ("re:(a+)+$", "re:(.*a)*b", r"re:(\w+\.?)+x$")
#: Hangs ``re.match`` on ``model.layers.0.post_attention_layernorm`` (hours, not seconds).
ON_LLAMA = r"re:(\w+\.?)+x$"


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail with TimeoutError when the block uses more than ``seconds`` of this process's CPU
    time (SIGPROF: other work on a shared machine does not run the clock down)."""
    if not hasattr(signal, "SIGPROF"):
        pytest.skip("needs SIGPROF")

    def expired(*_: Any) -> None:
        raise TimeoutError(f"still running after {seconds} CPU s: a pattern is backtracking")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


# -- the matcher ----------------------------------------------------------------------------------

PATTERNS = (
    "re:.*lm_head", "re:lm_head", r"re:.*lm_head$", r"re:model\.layers\.\d+$", r"re:model.layers.\d+.mlp",
    r"re:.*(q|k|v)_proj$", r"re:.*\.(gate|up)_proj", "re:(?i).*LM_HEAD", r"re:.*\bproj", r"re:.*_proj\b",
    r"re:[a-z]+\.layers\.[0-9]{1,2}\.", "re:.*norm$", "re:^model", r"re:(model\.)?layers", r"re:.*?experts\.\d+\.",
    r"re:\w+$", r"re:.*\Z", "re:.*[^.]$", r"re:model\.layers\.[13]\.", r"re:(?:.*\.)?q_proj", "re:.+", "re:x*",
    "re:.*a{2,3}", "re:(a|ab)(c|bcd)(d*)$", r"re:(?s).*\n", "re:.*\n", "re:.*$", r"re:\B", r"re:a\b", "re:",
    r"re:(?i:MODEL)\.", r"re:[^\W\d]+", r"re:model\.layers\.[0-9]+\.(self_attn|mlp)\.", "re:(?:a|b|c)+d?$",
    *HOSTILE,
)
NAMES = (
    "", "lm_head", "model", "model.layers.0.self_attn.q_proj", "model.layers.12.mlp.gate_proj",
    "model.layers.1.input_layernorm", "model.norm", "language_model.lm_head", "model.embed_tokens",
    "model.layers.3.mlp.experts.7.down_proj", "LM_HEAD", "aaaa", "aab", "abcd", "abcdd", "model.layers.0\n",
    "a", "a.b.x", "MODEL.x", "proj", "x", "ab.cd.ex",
)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_matcher_is_re_match(pattern: str) -> None:
    """compressed-tensors' rule: ``re:`` is ``re.match`` (a prefix match), and ``re.search`` /
    ``re.fullmatch`` (the lint's notes) agree too."""
    body = pattern[3:]
    compiled = linear_pattern(pattern)
    for name in NAMES if pattern not in HOSTILE else [n for n in NAMES if len(n) <= 16]:  # re backtracks
        assert regex_match(pattern, name) is (re.match(body, name) is not None), (pattern, name)
        assert target_matches(pattern, name, ("Linear",)) is (re.match(body, name) is not None), (pattern, name)
        assert compiled.run(name, search=True) is (re.search(body, name) is not None), (pattern, name)
        assert compiled.run(name, full=True) is (re.fullmatch(body, name) is not None), (pattern, name)


def test_the_matcher_is_re_on_random_patterns() -> None:
    """Seeded random patterns (alternation, repetition, lazy and counted repeats, anchors,
    ``\\b``, case-insensitive groups, MULTILINE) on random names with dots and newlines: the
    same answer as ``re`` for match, search and fullmatch, through the DFA and the anchored
    paths alike."""
    import random

    from recipe_spec.text.patterns import PatternError, compile_pattern

    rnd = random.Random(7)
    atoms = ["a", "b", ".", r"\.", r"\d", r"\w", "[ab]", "[^a]", "x", "\n", "(?:a|b)", "(a|)", "_"]

    def pattern(depth: int = 0, looped: bool = False) -> str:
        """A random pattern; inside a repetition no other repetition or alternation, so that
        ``re``, the reference, does not backtrack for minutes."""
        if depth > 3 or rnd.random() < 0.3:
            return rnd.choice(atoms)
        kind = rnd.random()
        if kind < 0.3 or (looped and kind < 0.7):
            return pattern(depth + 1, looped) + pattern(depth + 1, looped)
        if kind < 0.5:
            return f"({pattern(depth + 1)}|{pattern(depth + 1)})"
        if kind < 0.7:
            return f"({pattern(depth + 1, True)}){rnd.choice(['*', '+', '?', '{1,3}', '*?', '{2}'])}"
        if kind < 0.85:
            return (rnd.choice(["^", "$", r"\Z", r"\A", r"\b", r"\B", ""]) + pattern(depth + 1, looped)
                    + rnd.choice(["$", "", r"\Z"]))
        return f"(?i:{pattern(depth + 1, looped)})"

    checked = 0
    for _ in range(1500):
        body = ("(?m)" if rnd.random() < 0.1 else "") + pattern()
        try:
            compiled = compile_pattern("re:" + body)
        except PatternError:
            continue
        for _ in range(6):
            name = "".join(rnd.choice("ab.\n1x_A") for _ in range(rnd.randrange(0, 24)))
            assert compiled.run(name) is (re.match(body, name) is not None), (body, name)
            assert compiled.run(name, search=True) is (re.search(body, name) is not None), (body, name)
            assert compiled.run(name, full=True) is (re.fullmatch(body, name) is not None), (body, name)
            checked += 1
    assert checked > 5000


def test_plain_targets_are_names_or_classes() -> None:
    assert target_matches("lm_head", "lm_head") and not target_matches("lm_head", "model.lm_head")
    assert target_matches("Linear", "model.layers.0.mlp.up_proj", ("Linear", "Module"))
    assert not target_matches("Linear", "model.layers.0.mlp.up_proj", ("Embedding",))
    assert not target_matches(".*lm_head", "lm_head")  # regex text without re: is a name


@pytest.mark.parametrize(("name", "answers"), [
    ("a" * 20_000 + "!", (False, False, False)),
    ("a" * 20_000, (True, False, False)),
    ("a" * 20_000 + "b", (False, True, False)),
    ("ab." * 7_000 + "c", (False, True, False)),
    ("ab." * 7_000 + "x", (False, True, True)),
    ("model." + "a" * 10_000 + ".fc", (False, False, False)),
])
def test_nested_repetition_on_long_names_is_linear(name: str, answers: tuple[bool, ...]) -> None:
    with deadline(20):
        assert tuple(regex_match(p, name) for p in HOSTILE) == answers


def test_no_one_shot_code_compiles_a_recipe_pattern_with_re() -> None:
    """Every ``re:`` string of a recipe meets names through :mod:`recipe_spec.text.targets`:
    no module of the one-shot surfaces calls ``re`` on a pattern that is not a literal."""
    files = [*sorted((ROOT / "recipe_spec" / "oneshot").rglob("*.py")),
             ROOT / "recipe_spec" / "stage_dialect" / "matching.py",
             ROOT / "recipe_spec" / "stage_dialect" / "lint_model.py",
             ROOT / "recipe_spec" / "commands_oneshot.py",
             *sorted((ROOT / "backends" / "torch").glob("*.py")), *sorted((ROOT / "backends" / "keras").glob("*.py"))]
    dynamic = re.compile(r"(?<![`\w.])re\.(match|search|fullmatch|compile|finditer|findall|sub)\((?!r?[\"'])")
    found = [f"{f.relative_to(ROOT)}:{i}" for f in files
             for i, line in enumerate(f.read_text().splitlines(), 1) if dynamic.search(line)]
    assert found == []


# -- validate: what the matcher cannot run is refused, located ---------------------------------------

REFUSED = """\
smooth_stage:
  smooth_modifiers:
    SmoothQuantModifier:
      smoothing_strength: 0.5
      mappings:
        - [['re:.*q_proj', 're:(?P<p>.*)k_proj(?P=p)'], 're:.*input_layernorm']
quant_stage:
  quant_modifiers:
    GPTQModifier:
      targets: ['re:.*(?<!lm_head)$']
      scheme: W4A16
      ignore: [lm_head, 're:(?!model).*']
      sequential_targets: ['re:(?>model\\.layers\\.\\d+)$']
"""
#: (line, column, what the message names) of each refused pattern of REFUSED.
REFUSED_AT = [(6, 28, "backreference"), (10, 17, "lookahead or lookbehind"), (12, 25, "lookahead or lookbehind"),
              (13, 28, "atomic group")]


def test_validate_refuses_what_the_matcher_cannot_run() -> None:
    found = [d for d in validate(REFUSED) if d.code == "P005"]
    assert [(d.line, d.column) for d in found] == [(line, col) for line, col, _ in REFUSED_AT]
    for d, (_, _, what) in zip(found, REFUSED_AT, strict=True):
        assert d.severity.value == "error" and what in d.message and "linear time" in d.message, d.message
        assert d.hint.startswith("Write") or d.hint.startswith("Spell out"), d.hint
    assert "ignore:" in found[1].hint  # a negative lookahead: say what to leave out instead
    # nested repetition is not refused: it runs in linear time
    assert [d for d in validate(REFUSED.replace("(?<!lm_head)$", "(a+)+$").replace("(?!model).*", "(.*a)*b")
                                .replace("(?P<p>.*)k_proj(?P=p)", ".*k_proj").replace("(?>", "("))
            if d.code == "P005"] == []


def test_too_many_states_is_refused_with_its_fix() -> None:
    text = "q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      scheme: W8A16\n      ignore: ['re:(a{1,100}){1,100}']\n"
    (d,) = [d for d in validate(text) if d.code == "P005"]
    assert (d.line, d.column) == (5, 16) and "1000 states" in d.message and "a+" in d.hint


# -- PyTorch ------------------------------------------------------------------------------------------

def _torch() -> Any:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _llama(name: str) -> Any:
    _torch()
    transformers = pytest.importorskip("transformers")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from testdata import LLMCOMPRESSOR

    case = json.loads((LLMCOMPRESSOR / name / "case.json").read_text())
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**case["model_config"])).float().eval()
    model.load_state_dict(safetensors_torch.load_file(str(LLMCOMPRESSOR / name / "initial.safetensors")))
    samples = [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in case["calibration"]["token_ids"]]
    return model, samples, case


def _snapshot(model: Any) -> dict[str, Any]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(model: Any, before: dict[str, Any]) -> bool:
    torch = _torch()
    state = model.state_dict()
    return set(state) == set(before) and all(torch.equal(v, before[k]) for k, v in state.items())


def test_oneshot_refuses_before_the_model_is_touched() -> None:
    import recipe_spec
    from recipe_spec.diagnostics.base import RecipeError

    model, samples, _ = _llama("02_sparsegpt_2of4")
    before = _snapshot(model)
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=REFUSED, dataset=samples, num_calibration_samples=2)
    refused = [(d.code, d.line, d.column, d.message) for d in err.value.diagnostics if d.code == "P005"]
    assert refused == [(d.code, d.line, d.column, d.message) for d in validate(REFUSED) if d.code == "P005"]
    assert _same(model, before)
    # silenced in validate's verdict, the pattern still cannot run: refused all the same
    silenced = "s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n" \
               "      ignore: [lm_head, 're:(?!model).*']  # noqa: P005\n"
    assert [d.code for d in validate(silenced) if d.severity.value == "error"] == []
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=silenced, dataset=samples, num_calibration_samples=2)
    assert [(d.code, d.line, d.column) for d in err.value.diagnostics] == [("P005", 5, 25)]
    assert _same(model, before)
    # a keyword argument that carries patterns goes through the same check
    recipe = "s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, ignore: [lm_head]}\n"
    with pytest.raises(ValueError, match=r"sequential_targets: 're:\(\?=x\)' uses a lookahead") as bad:
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, sequential_targets=["re:(?=x)"])
    assert "linear time" in str(bad.value) and _same(model, before)


def test_torch_llama_with_nested_repetition_is_llm_compressors_run() -> None:
    """llm-compressor 0.14's SparseGPT 2:4 run, with hostile patterns that match nothing added
    to targets and ignore, and its blocks named by a ``re:`` pattern: the same weights, at once.
    A hostile pattern in ``sequential_targets`` names no block: refused at once, model untouched."""
    import recipe_spec

    safetensors_torch = pytest.importorskip("safetensors.torch")
    from testdata import LLMCOMPRESSOR

    name = "02_sparsegpt_2of4"
    model, samples, case = _llama(name)
    recipe = case["recipe_yaml"].replace('targets: ["Linear"]', f"targets: [Linear, '{ON_LLAMA}']")
    recipe = recipe.replace('ignore: ["re:.*lm_head"]', "ignore: ['re:.*lm_head', " + ", ".join(
        f"'{p}'" for p in HOSTILE) + "]")
    assert ON_LLAMA in recipe and HOSTILE[0] in recipe
    blocks: list[str] = []
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with deadline(300), pytest.raises(ValueError, match="no such class or module"):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, num_calibration_samples=16,
                            shuffle_calibration_samples=False, sequential_targets=[ON_LLAMA, r"re:model\.layers\.\d+$"])
    assert all(bool((v == before[k]).all()) for k, v in model.state_dict().items())
    with deadline(300):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=samples, num_calibration_samples=16,
                            shuffle_calibration_samples=False, sequential_targets=[r"re:model\.layers\.\d+$"],
                            progress=lambda what, done, total: blocks.append(what) if done else None)
    assert blocks == [f"model.layers.{i}" for i in range(case["model_config"]["num_hidden_layers"])]
    final = safetensors_torch.load_file(str(LLMCOMPRESSOR / name / "final.safetensors"))
    state = model.state_dict()
    for key, want in final.items():
        if key.endswith("proj.weight"):
            assert float((state[key] - want).abs().max() / want.abs().max()) <= 1e-3, key
    assert (state["lm_head.weight"] == final["lm_head.weight"]).all()


def test_torch_smoothing_and_quantization_with_nested_repetition() -> None:
    """SmoothQuant's mappings and a quantization modifier's targets and ignore, with hostile
    patterns (matching nothing) beside the real ones: the run is the one without them."""
    import recipe_spec
    from recipe_spec.oneshot import last_report

    def recipe(extra: str) -> str:
        more, alternative = (f", '{extra}'", f"|{extra[3:]}") if extra else ("", "")
        return ("smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n      smoothing_strength: 0.5\n"
                "      mappings:\n        - [['re:.*q_proj', 're:.*k_proj', 're:.*v_proj'], "
                f"'re:.*input_layernorm{alternative}']\n"
                "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      scheme: W8A8\n"
                f"      targets: [Linear{more}]\n      ignore: [lm_head{more}]\n")

    runs = []
    for extra in ("", ON_LLAMA):
        model, samples, _ = _llama("02_sparsegpt_2of4")
        with deadline(300):
            recipe_spec.oneshot(model=model, recipe=recipe(extra), dataset=samples, num_calibration_samples=4,
                                shuffle_calibration_samples=False)
        runs.append(model.state_dict())
        assert [(s.smooth, len(s.balance)) for s in last_report().smoothing] == [
            ("model.layers.0.input_layernorm", 3), ("model.layers.1.input_layernorm", 3)]
    plain, hostile = runs
    assert set(plain) == set(hostile) and "model.layers.1.mlp.down_proj.weight_scale" in plain
    assert "lm_head.weight_scale" not in plain
    assert all(bool((plain[k] == hostile[k]).all()) for k in plain)


def test_torch_long_module_names() -> None:
    """Module names hundreds of characters long, hostile patterns in targets: the datafree run
    prunes the layer the class name targets, at once."""
    import recipe_spec

    torch = _torch()
    torch.manual_seed(0)
    outer, inner = "a" * 200 + "_c", "a" * 300 + "_fc"  # a late failure for each pattern
    model = torch.nn.Module()
    block = torch.nn.Module()
    block.add_module(inner, torch.nn.Linear(16, 16))
    model.add_module(outer, block)
    targets = ", ".join(f"'{p}'" for p in HOSTILE)
    recipe = ("s_stage:\n  s_modifiers:\n    MagnitudePruningModifier:\n      init_sparsity: 0.5\n"
              f"      final_sparsity: 0.5\n      targets: [{targets}, Linear]\n")
    with deadline(120):
        recipe_spec.oneshot(model=model, recipe=recipe)
    weight = model.get_submodule(f"{outer}.{inner}").weight
    assert float((weight == 0).float().mean()) == 0.5


# -- Keras --------------------------------------------------------------------------------------------

def test_keras_long_layer_names() -> None:
    """A functional Keras model whose Dense layer has a long name: SparseGPT with hostile
    patterns in targets and ignore prunes as it does without them, at once; hostile patterns
    in sequential_targets name no block of it: refused at once."""
    keras = pytest.importorskip("keras")
    import numpy as np
    from keras_hub_cases import plain_samples

    import recipe_spec

    long = "a" * 300 + "_fc"

    def model() -> Any:
        keras.utils.set_random_seed(3)
        ids = keras.Input(shape=(None,), dtype="int32", name="ids")
        x = keras.layers.Embedding(40, 16, name="embed")(ids)
        x = keras.layers.Dense(24, activation="relu", name=long)(x)
        return keras.Model(ids, keras.layers.Dense(40, name="head")(x))

    def run(extra: str) -> Any:
        m = model()
        recipe = ("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n      mask_structure: '2:4'\n"
                  f"      targets: [Linear{extra}]\n      ignore: [head{extra}]\n")
        with deadline(300):
            recipe_spec.oneshot(model=m, recipe=recipe, dataset=plain_samples(), num_calibration_samples=6,
                                shuffle_calibration_samples=False, sequential_targets=[long])
        return keras.ops.convert_to_numpy(m.get_layer(long).kernel)

    with deadline(300), pytest.raises(ValueError, match="no such class or module"):
        recipe_spec.oneshot(model=model(), recipe="s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5}\n",
                            dataset=plain_samples(), sequential_targets=[*HOSTILE, long])
    hostile = run("".join(f", '{p}'" for p in HOSTILE))
    assert float((hostile == 0).mean()) == 0.5
    np.testing.assert_array_equal(hostile, run(""))


# -- the command line: lint (the oneshot command: test_oneshot_cli.py) ----------------------------------

SGPT = f"""\
sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier:
      sparsity: 0.5
      mask_structure: "2:4"
      targets: [Linear, '{ON_LLAMA}']
      ignore: ['re:.*lm_head', '{HOSTILE[0]}', '{HOSTILE[1]}', '{ON_LLAMA}']
"""


def test_lint_against_a_checkpoint(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``lint --model``: the tools' matching (P001), the one-shot checks, the mappings and the
    estimate, with hostile patterns; and a refused pattern is P005 there too, no traceback."""
    from test_oneshot_lint import header_checkpoint

    folder = header_checkpoint(tmp_path / "m")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT.replace("sparsity_stage", "smooth_stage:\n  smooth_modifiers:\n    SmoothQuantModifier:\n"
                                   "      mappings:\n        - [['re:.*q_proj', 're:.*k_proj'], "
                                   f"'re:.*input_layernorm|{ON_LLAMA[3:]}']\nsparsity_stage", 1)
                      + f"      sequential_targets: [LlamaDecoderLayer, '{ON_LLAMA}']\n"
                      + "q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                      + f"      ignore: [lm_head, '{ON_LLAMA}']\n")
    with deadline(300):
        code = main(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor", "--format", "json",
                     "--num-samples", "4", "--seq-len", "16"])
    out = capsys.readouterr()
    found = [(d["code"], d["severity"]) for d in json.loads(out.out)["files"][0]["diagnostics"]]
    assert ("P005", "error") not in found and code in (0, 1), found
    assert "SparseGPTModifier" in out.err and "GPTQModifier" in out.err  # the estimate, on stderr with json
    recipe.write_text(SGPT.replace(HOSTILE[0], "re:(?!model).*"))
    with deadline(120):
        code = main(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor"])
    out = capsys.readouterr()
    assert code == 1 and "P005" in out.out and ":7:32: P005" in out.out and ":7:32: P001" not in out.out and "Traceback" not in out.err, out
