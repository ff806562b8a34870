"""``validate --backend`` and ``recipe_spec.oneshot`` agree on every argument of every one-shot
modifier (of any release: those the run reads and those it refuses): cases generated from the
catalogue's declarations (each argument absent, at and
beyond each bound, of a wrong type, each enum value, its default) are validated for a backend
and run; ``validate`` reports an error exactly when ``oneshot`` refuses the recipe, and a
refusal leaves the weights untouched. The run stops where the pipeline would start (every
check before a weight changes has passed), so a case costs the checks, not a compression."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from recipe_spec.diagnostics.base import Severity
from recipe_spec.modifiers.spec import Arg
from recipe_spec.oneshot.algorithms import BY_MODIFIER
from recipe_spec.oneshot.settings import declared
from recipe_spec.stage_dialect.catalogue import stage_variants
from recipe_spec.stage_dialect.spec import BASE_ARGS
from recipe_spec.validation import validate

#: A recipe entry each modifier runs with as written (the case changes one argument of it);
#: AWQ searches with the weight grid of the quantization modifier after it. The training-time
#: pruning modifiers ``oneshot`` also reads are run in a one-shot recipe (beside a quantizer):
#: alone, they make a training recipe, which ``validate --backend`` judges as ``modify()`` runs it.
BASE: dict[str, dict[str, Any]] = {
    "SparseGPTModifier": {"sparsity": 0.5},
    "WandaPruningModifier": {"sparsity": 0.5},
    "MagnitudePruningModifier": {"targets": "__ALL_PRUNABLE__", "init_sparsity": 0.05, "final_sparsity": 0.5},
    "ConstantPruningModifier": {"targets": "__ALL_PRUNABLE__"},
    "GPTQModifier": {"scheme": "W8A8", "targets": "Linear", "ignore": ["lm_head"]},
    "QuantizationModifier": {"scheme": "W8A8", "targets": "Linear", "ignore": ["lm_head"]},
    "SmoothQuantModifier": {"smoothing_strength": 0.5},
    "LogarithmicEqualizationModifier": {},
    "AWQModifier": {},
    # a rotation's fit depends on the model's widths (P014, checked on the model): the base
    # rotates nothing here (QuIP: no target matches; SpinQuant: R2 alone, on the head width)
    "QuIPModifier": {"targets": "re:.*nothing$"},
    "SpinQuantModifier": {"rotations": ["R2"]},
    # AutoRound's presets group by 128, wider than this model's 64 columns: per-channel groups;
    # it tunes decoder blocks, so its group targets the layers inside them (lm_head, outside,
    # is refused on the model whatever ``ignore`` says: a check of the model, not the arguments)
    "AutoRoundModifier": {"config_groups": {"g": {"targets": [r"re:model\.layers\..*_proj$"], "weights": {
        "num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}}}, "ignore": ["lm_head"], "iters": 0},
    # expert pruning needs a mixture-of-experts model: its cases run on one (below)
    "REAPPruningModifier": {"sparsity": 0.5},
}
#: The modifiers whose cases run on a mixture-of-experts model on PyTorch.
_MOE = {"REAPPruningModifier"}
_QUANTIZER = "    QuantizationModifier: {scheme: W8A8, targets: Linear, ignore: [lm_head]}\n"
_AFTER = {"AWQModifier": _QUANTIZER, "MagnitudePruningModifier": _QUANTIZER, "ConstantPruningModifier": _QUANTIZER}
_ABSENT = object()


def _types(schema: Any) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def edge_values(arg: Arg) -> Iterator[Any]:
    """The values a case gives ``arg``: its default, each enum value and one outside them,
    each bound and the values just beyond it, a value of each type it takes, one of a type it
    does not take, and null."""
    schema = arg.schema
    types = _types(schema)
    if arg.default is not None:
        yield arg.default
    yield from schema.get("enum", [])
    if "enum" in schema:
        yield "not-a-choice"
    number = "integer" in types or "number" in types
    step = 1 if "integer" in types else 0.5
    for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if bound in schema:
            b = schema[bound]
            yield from (b - step, b, b + step)
    if number:
        yield from (0, 1, 2.5 if "number" in types else 3)
    if "boolean" in types:
        yield from (True, False)
    if "string" in types and "enum" not in schema:
        yield from ("2:4", "0:0", "x")
    if "array" in types:
        items = _types(schema.get("items", {}))
        yield from ([], [0.5, 0.4] if "number" in items else ["Linear"], [1])
    if "object" in types:
        yield {}
    yield "x" if number or "boolean" in types else 7
    yield None


def every_argument(name: str) -> dict[str, Arg]:
    """Every argument of modifier ``name`` in any release of either tool (those the run reads,
    and those it refuses), and the base class's."""
    out = {a.name: a for a in BASE_ARGS}
    for variant in stage_variants(name):
        out.update({a.name: a for a in variant.spec.args})
    return out


def _cases() -> Iterator[tuple[str, str, Any]]:
    for name in BASE:
        assert name in BY_MODIFIER, name
        for key, arg in sorted(every_argument(name).items()):
            seen: list[Any] = []
            for value in (_ABSENT, *edge_values(arg)):
                if any(value is v or (type(value) is type(v) and value == v) for v in seen):
                    continue
                seen.append(value)
                yield name, key, value


CASES = list(_cases())


def _recipe(name: str, key: str, value: Any) -> str:
    args = dict(BASE[name])
    if value is _ABSENT:
        args.pop(key, None)
    else:
        args[key] = value
    return f"s_stage:\n  s_modifiers:\n    {name}: {json.dumps(args)}\n" + _AFTER.get(name, "")


def test_the_cases_cover_every_argument_of_every_one_shot_modifier() -> None:
    assert set(BASE) == set(BY_MODIFIER)
    for name in BASE:
        keys = {k for n, k, _ in CASES if n == name}
        assert keys == set(every_argument(name)) and set(declared(name)) <= keys, name
    assert len(CASES) > 800


class _Reached(Exception):
    """The run got past every check: the pipeline would start now."""


def _stop(*args: Any, **kwargs: Any) -> None:
    raise _Reached


def _agree(backend: str, model: Any, weights: Any, samples: Any, monkeypatch: pytest.MonkeyPatch,
           stop: str = "pipeline.run_pipeline", only: Any = lambda name: True) -> list[str]:
    """The cases where ``validate --backend`` and ``oneshot`` disagree, and those where a
    refusal changed a weight. The run stops at ``stop`` (``module.function`` of
    :mod:`recipe_spec.oneshot`, a step of :func:`~recipe_spec.oneshot.api.apply_oneshot`): by
    default where the pipeline would start. ``only(name)``: the modifiers whose cases run."""
    import importlib

    import recipe_spec

    module, name = stop.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(f"recipe_spec.oneshot.{module}"), name, _stop)
    wrong = []
    for name, key, value in CASES:
        if not only(name):
            continue
        text = _recipe(name, key, value)
        said = [d for d in validate(text, backend=backend) if d.severity is Severity.ERROR]
        try:
            with _quiet():
                recipe_spec.oneshot(model=model, recipe=text, dataset=samples)
            refused: BaseException | None = None
        except _Reached:
            refused = None
        except Exception as exc:  # noqa: BLE001  any refusal counts
            refused = exc
        where = f"{name} {key}={'(absent)' if value is _ABSENT else json.dumps(value)}"
        if bool(said) != (refused is not None):
            wrong.append(f"{where}: validate {[d.code + ' ' + d.message for d in said]}, oneshot "
                         f"{type(refused).__name__ + ': ' + str(refused)[:200] if refused else 'runs'}")
        if weights() != weights.before:
            wrong.append(f"{where}: the weights changed")
            weights.before = weights()
    return wrong


class _quiet:
    """Warnings of the runs (the recipes' own) are not this test's concern."""

    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)


class _Weights:
    """A fingerprint of a model's weights (sum and sum of squares per weight)."""

    def __init__(self, read: Any):
        self.read = read
        self.before = read()

    def __call__(self) -> Any:
        return self.read()


def test_validate_and_oneshot_agree_on_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    samples = [{"input_ids": torch.randint(0, 64, (8,), generator=g), "attention_mask": torch.ones(8, dtype=torch.long)}
               for _ in range(2)]
    weights = _Weights(lambda: [(n, float(p.detach().double().sum()), float(p.detach().double().square().sum()))
                                for n, p in model.named_parameters()])
    wrong = _agree("torch", model, weights, samples, monkeypatch, only=lambda name: name not in _MOE)
    assert not wrong, "\n".join(wrong[:20]) + f"\n({len(wrong)} in all)"


def _tiny_qwen3_moe(torch: Any, transformers: Any) -> Any:
    """A tiny Qwen3-MoE (4 experts, top 2, two layers), seed 0."""
    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                         head_dim=16, num_experts=4, num_experts_per_tok=2,
                                         max_position_embeddings=32)
    return transformers.Qwen3MoeForCausalLM(config).eval()


def test_validate_and_oneshot_agree_on_a_mixture_of_experts_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Expert pruning's cases on a tiny Qwen3-MoE (4 experts, top 2, two layers)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = _tiny_qwen3_moe(torch, transformers)
    g = torch.Generator().manual_seed(1)
    samples = [{"input_ids": torch.randint(0, 64, (8,), generator=g), "attention_mask": torch.ones(8, dtype=torch.long)}
               for _ in range(2)]
    weights = _Weights(lambda: [(n, float(p.detach().double().sum()), float(p.detach().double().square().sum()))
                                for n, p in model.named_parameters()])
    wrong = _agree("torch", model, weights, samples, monkeypatch, only=lambda name: name in _MOE)
    assert not wrong, "\n".join(wrong[:20]) + f"\n({len(wrong)} in all)"


def test_validate_and_oneshot_agree_on_keras(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    pytest.importorskip("keras")
    from keras_hub_cases import hf_folder, llama, needs_hub, samples  # noqa: F401

    hub = pytest.importorskip("keras_hub")
    assert hub is not None
    name = "02_sparsegpt_2of4"
    model = llama(hf_folder(tmp_path / "ckpt", name))
    import numpy as np

    weights = _Weights(lambda: [(v.path, float(np.asarray(v.numpy(), dtype=np.float64).sum()),
                                 float(np.square(np.asarray(v.numpy(), dtype=np.float64)).sum()))
                                for v in model.weights])
    # keras-hub's head is a ReversibleEmbedding, which no Keras quantized layer holds: a recipe
    # that quantizes it is refused on this model (the model's check, which ``lint`` and
    # ``oneshot`` make), not for its arguments; the run stops after the recipe's own checks
    wrong = _agree("keras", model, weights, samples(name)[:2], monkeypatch, stop="preflight.check_mappings",
                   only=lambda name: name not in _MOE)
    assert not wrong, "\n".join(wrong[:20]) + f"\n({len(wrong)} in all)"


def test_validate_and_oneshot_agree_on_a_keras_hub_mixture_of_experts_model(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Any) -> None:
    """Expert pruning's cases on keras-hub's twin of a tiny Qwen3-MoE (4 experts, top 2)."""
    pytest.importorskip("keras")
    pytest.importorskip("keras_hub")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import numpy as np
    from recipe_spec_keras.hub import load_causal_lm

    _tiny_qwen3_moe(torch, transformers).save_pretrained(tmp_path)
    model = load_causal_lm(tmp_path)
    rng = np.random.default_rng(1)
    samples = [{"token_ids": rng.integers(0, 64, 8).astype("int32"), "padding_mask": np.ones(8, bool)}
               for _ in range(2)]
    weights = _Weights(lambda: [(v.path, float(np.asarray(v.numpy(), dtype=np.float64).sum()),
                                 float(np.square(np.asarray(v.numpy(), dtype=np.float64)).sum()))
                                for v in model.weights])
    wrong = _agree("keras", model, weights, samples, monkeypatch, only=lambda name: name in _MOE)
    assert not wrong, "\n".join(wrong[:20]) + f"\n({len(wrong)} in all)"


def test_edge_values_follow_the_declaration() -> None:
    block = declared("GPTQModifier")["block_size"]
    values = list(edge_values(block))
    assert values[0] == 128 and 0 in values and 1 in values and 2 in values and "x" in values
    duo = list(edge_values(declared("AWQModifier")["duo_scaling"]))
    assert duo[0] is True and {False, "both", "not-a-choice", None} <= set(duo)
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in values)
