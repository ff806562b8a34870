"""``recipe_spec.oneshot`` on PyTorch, end to end against llm-compressor 0.14's own runs
(``tests/data/conformance/llmcompressor``): tiny Llama models built from each case's config, its
initial weights, its calibration token ids, and the final weights and zero patterns it stored."""

from __future__ import annotations

import base64
import json
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from testdata import LLMCOMPRESSOR  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402
from recipe_spec.masks.algorithms import compute_mask  # noqa: E402
from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: E402
from recipe_spec.oneshot import last_report, prepare  # noqa: E402
from recipe_spec.oneshot.shared.hessian import HessianStats  # noqa: E402

CASES = LLMCOMPRESSOR


def _case(name: str) -> dict:
    return json.loads((CASES / name / "case.json").read_text())


def _model(name: str) -> torch.nn.Module:
    torch.set_num_threads(1)
    case = _case(name)
    config = transformers.LlamaConfig(**case["model_config"])
    model = transformers.LlamaForCausalLM(config).float().eval()
    model.load_state_dict(safetensors_torch.load_file(str(CASES / name / "initial.safetensors")))
    return model


def _samples(name: str) -> list[dict]:
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in _case(name)["calibration"]["token_ids"]]


class _Table:
    """A tokenised ``datasets.Dataset`` as oneshot sees it (an ``input_ids`` column, rows by index)."""

    def __init__(self, rows: list[dict]):
        self.rows, self.column_names = rows, ["input_ids", "attention_mask"]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


def _run(name: str, dataset: object, **options: object) -> torch.nn.Module:
    model = _model(name)
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=dataset,
                        num_calibration_samples=16, shuffle_calibration_samples=False, batch_size=1,
                        **options)
    return model


def _zeros(entry: dict) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(base64.b64decode(entry["zeros_bitmask_b64"]), np.uint8), bitorder="big")
    return bits[: int(np.prod(entry["shape"]))].reshape(entry["shape"]).astype(bool)


@pytest.mark.parametrize(("name", "table"), [("02_sparsegpt_2of4", False), ("04_wanda_2of4", True)])
def test_conformance_case_end_to_end(name: str, table: bool) -> None:
    """The run says nothing about other releases (an llm-compressor recipe is not checked
    against SparseML 1.6 here: a one-shot run follows llm-compressor's newest rules)."""
    import warnings

    samples = _samples(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = _run(name, _Table(samples) if table else samples)
    assert last_report().order == _case(name)["calibration"]["order_of_samples_fed"]
    final = safetensors_torch.load_file(str(CASES / name / "final.safetensors"))
    masks = json.loads((CASES / name / "masks.json").read_text())["layers"]
    state = model.state_dict()
    for layer, entry in masks.items():
        ours = state[f"{layer}.weight"]
        agree = float(((ours == 0).numpy() == _zeros(entry)).mean())
        assert agree >= 0.999, (layer, agree)
        ref = final[f"{layer}.weight"]
        rel = float((ours - ref).abs().max() / ref.abs().max())
        assert rel <= 1e-3, (layer, rel)
    assert torch.equal(state["lm_head.weight"], final["lm_head.weight"])


def test_hooks_collect_the_hessians_llm_compressor_handed_to_sparsegpt() -> None:
    from recipe_spec_torch.oneshot import TorchCalibrationHost

    name = "02_sparsegpt_2of4"
    stored = safetensors_torch.load_file(str(CASES / name / "intermediates.safetensors"))
    model = _model(name)
    with TorchCalibrationHost(model) as host:
        cal = prepare(host, _samples(name), num_calibration_samples=16, shuffle=False, batch_size=1)
        assert cal.order == _case(name)["calibration"]["order_of_samples_fed"]
        inputs = host.capture("model.layers.0", cal.batches, offload=True)
        layers = ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj")
        stats = {f"model.layers.0.{m}": HessianStats(host.ops, host.weight(f"model.layers.0.{m}").shape[1],
                                                     torch.zeros(1)) for m in layers}
        host.run_block("model.layers.0", inputs, {n: s.add for n, s in stats.items()}, propagate=False)
    for n, s in stats.items():
        ref = stored[f"sparsegpt.hessian.{n}"]
        assert s.samples == 16
        torch.testing.assert_close(s.hessian, ref, rtol=1e-5, atol=1e-6 * float(ref.abs().max()))


def test_one_shot_magnitude_prunes_each_layer_by_its_own_magnitude() -> None:
    name = "02_sparsegpt_2of4"
    model = _model(name)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    recipe = ("sparsity_stage:\n  sparsity_modifiers:\n    MagnitudePruningModifier:\n"
              "      targets: ['re:model.layers.\\d+$']\n      init_sparsity: 0.3\n      final_sparsity: 0.3\n")
    recipe_spec.oneshot(model=model, recipe=recipe)
    after = model.state_dict()
    for key, w in before.items():
        if ".layers." in key and key.endswith("proj.weight"):
            keep = compute_mask(NUMPY_OPS, w.numpy(), 0.3, "unstructured")
            assert np.array_equal(after[key].numpy(), np.where(keep, w.numpy(), 0.0)), key
            assert abs(float((after[key] == 0).float().mean()) - 0.3) < 1e-3
        else:
            assert torch.equal(after[key], w), key


def test_plain_lm_head_in_ignore_keeps_it_dense_and_output_dir_is_written(tmp_path: pathlib.Path) -> None:
    name = "04_wanda_2of4"
    model = _model(name)
    recipe = ("sparsity_stage:\n  sparsity_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n"
              "      ignore: [lm_head]\n")
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(name), num_calibration_samples=4,
                        output_dir=tmp_path / "out", sequential_offload_device="cpu")
    assert float((model.lm_head.weight == 0).float().mean()) == 0.0
    assert float((model.model.layers[1].mlp.down_proj.weight == 0).float().mean()) == 0.5
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {"config.json", "model.safetensors", "recipe.yaml"} <= set(written), written
    assert (tmp_path / "out" / "recipe.yaml").read_text() == recipe


def _error_recipes() -> list[tuple[str, str]]:
    case = _case("12_error_cases")
    extra = [("nm_overrides_sparsity", "s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.7\n"
              "      mask_structure: '2:4'\n")]
    return [(s["sub_case"], s["recipe_yaml"]) for s in case["sub_cases"]] + extra


@pytest.mark.parametrize(("sub_case", "recipe"), _error_recipes())
def test_each_error_case_is_refused_before_any_weight_changes(sub_case: str, recipe: str) -> None:
    model = _model("12_error_cases")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples("12_error_cases"),
                            num_calibration_samples=2)
    for d in err.value.diagnostics:
        assert d.line >= 1 and d.column >= 1 and d.code and d.hint, d.format()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_manager_apply_runs_the_same_pipeline() -> None:
    name = "04_wanda_2of4"
    model = _model(name)
    manager = recipe_spec.ScheduledModifierManager.from_yaml(_case(name)["recipe_yaml"])
    manager.apply(model, calibration=_samples(name), num_calibration_samples=16, shuffle_calibration_samples=False)
    final = safetensors_torch.load_file(str(CASES / name / "final.safetensors"))
    w = model.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(w == 0, final["model.layers.0.self_attn.q_proj.weight"] == 0)


def test_a_cholesky_failure_is_reported_with_the_layer_name() -> None:
    from recipe_spec_torch.masks import TORCH_OPS

    from recipe_spec.oneshot.compress import compress_module
    from recipe_spec.oneshot.modifiers import resolve

    class Host:
        ops = TORCH_OPS

        def __init__(self) -> None:
            self.w = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))

        def weight(self, name: str) -> torch.Tensor:
            return self.w.clone()

        def set_weight(self, name: str, value: torch.Tensor) -> None:
            self.w = value

    class Stats:
        samples = 1

        def __init__(self, h: torch.Tensor) -> None:
            self.hessian = h

    recipe = recipe_spec.loads("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n")
    (mod,) = resolve(recipe, frozenset({"oneshot", "scores:sparsegpt"}), "torch")
    with pytest.warns(UserWarning, match=r"layer\.x: .*cholesky"):
        compress_module(Host(), mod, "layer.x", Stats(torch.diag(torch.tensor([1.0, 1.0, -0.05]))))
    with pytest.raises(Exception, match=r"SparseGPTModifier \(<string>:3\) on layer\.x"):
        compress_module(Host(), mod, "layer.x", Stats(-torch.eye(3)))


def test_a_dataloader_feeds_its_own_batches() -> None:
    name = "04_wanda_2of4"
    rows = [{"input_ids": torch.tensor(ids[:32]), "attention_mask": torch.ones(32, dtype=torch.long)}
            for ids in _case(name)["calibration"]["token_ids"]]
    loader = torch.utils.data.DataLoader(rows, batch_size=4)
    model = _model(name)
    recipe_spec.oneshot(model=model, recipe=_case(name)["recipe_yaml"], dataset=loader, num_calibration_samples=8)
    assert last_report().order is None
    assert float((model.model.layers[0].mlp.up_proj.weight == 0).float().mean()) == 0.5


@pytest.mark.parametrize("name", ["02_sparsegpt_2of4", "10_staged_sparse24_gptq_w4a16"])
def test_layers_fed_one_input_share_its_hessian_product_bit_for_bit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """q/k/v (and gate/up) are fed one tensor: their Hessians add one product computed once, and
    the run's weights are those of a run that computes each layer's product itself."""
    from recipe_spec_torch.masks import TorchOps
    from shared_products import count_products

    computed = count_products(monkeypatch)
    shared = _run(name, _samples(name)).state_dict()
    calls, products = len(computed), sum(computed)
    assert calls > 0 and products <= calls * 0.6  # per block: 7 layers, 4 distinct inputs (3 for 2 blocks, ...)
    monkeypatch.setattr(TorchOps, "same_values", lambda self, a, b: False)  # nothing shared
    computed.clear()
    alone = _run(name, _samples(name)).state_dict()
    assert sum(computed) == len(computed)
    for key, value in alone.items():
        assert torch.equal(shared[key], value), key


def test_a_calibration_call_stops_once_every_observed_layer_has_its_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call of a block's calibration pass runs whole; the later ones stop right after
    the last observed layer (down_proj) has had its input, so its product is not computed; the
    propagation pass runs whole. The weights are those of running every call whole."""
    import transformers

    from recipe_spec.oneshot.host import ObservedCalls

    def run() -> tuple[dict[str, torch.Tensor], list[int]]:
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32))
        counts = [0, 0]
        for k, layer in enumerate(model.model.layers):
            layer.mlp.down_proj.register_forward_hook(lambda *_, k=k: counts.__setitem__(k, counts[k] + 1))
        data = [{"input_ids": list(range(4 + i, 20 + i))} for i in range(4)]
        recipe_spec.oneshot(model=model, dataset=data, progress=False, num_calibration_samples=4,
                            recipe="s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, ignore: [lm_head]}\n")
        return {k: v.clone() for k, v in model.state_dict().items()}, counts

    stopped, counts = run()
    # one whole-model call before the run (its checks), then layer 0: 1 whole calibration call
    # of 4 and 4 propagation calls; layer 1 (the last, nothing to propagate): 1 calibration call
    assert counts == [1 + 1 + 4, 1 + 1]
    monkeypatch.setattr(ObservedCalls, "called", lambda self, name: None)
    whole, counts = run()
    assert counts == [1 + 4 + 4, 1 + 4]
    assert all(torch.equal(stopped[k], whole[k]) for k in whole)
