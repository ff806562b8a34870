"""Second-order pruning beyond SparseML's golden runs: the inverse Fisher against a dense
inverse (NumPy's ``linalg.inv``), OBS ``block4`` against a dense transcription of its
formulas, the checks that refuse a recipe before training (M012), both M-FAC spellings, and
one-shot use."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from recipe_spec_torch.second_order import fisher_inverse  # noqa: E402

from recipe_spec import RecipeError, ScheduledModifierManager, loads  # noqa: E402
from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: E402
from recipe_spec.pruning.second_order.fisher import FisherInverse  # noqa: E402
from recipe_spec.pruning.second_order.scoring import obs_step  # noqa: E402


def dense_inverse(g: np.ndarray, damp: float, block: int | None) -> np.ndarray:
    """The block-diagonal inverse, block by block with ``np.linalg.inv``."""
    m, d = g.shape
    b = d if not block or block >= d else block
    out = np.zeros((d, d))
    for s in range(0, d, b):
        gb = g[:, s:s + b]
        out[s:s + b, s:s + b] = np.linalg.inv(damp * np.eye(gb.shape[1]) + gb.T @ gb / m)
    return out


@pytest.mark.parametrize(("m", "d", "block"), [(8, 10, None), (8, 10, 4), (4, 30, 7), (16, 12, 5), (3, 9, 3), (6, 20, 20)])
def test_inverse_equals_dense(m: int, d: int, block: int | None) -> None:
    rng = np.random.default_rng(m * 100 + d)
    g, v = rng.standard_normal((m, d)), rng.standard_normal(d)
    want = dense_inverse(g, 0.05, block)
    for f in (FisherInverse(NUMPY_OPS, g, 0.05, block), fisher_inverse(torch.tensor(g), 0.05, block)):
        np.testing.assert_allclose(np.asarray(f.diag()), np.diag(want), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(f.mul(torch.tensor(v) if isinstance(f.diag(), torch.Tensor) else v)), want @ v, rtol=1e-9, atol=1e-12)
    assert np.array_equal(g, g)  # the gradients are not modified


@pytest.mark.parametrize(("m", "d", "block"), [(4, 30, 7), (8, 40, 10), (5, 9, 3)])
def test_the_gpu_path_equals_dense(m: int, d: int, block: int) -> None:
    """What a GPU runs (``R⁻¹`` by one batched triangular solve, ``diag`` in pieces of its
    working size), forced on the CPU, gives the dense inverse too."""
    from recipe_spec_torch.masks import TorchOps

    class GpuLike(TorchOps):
        def lower_inverse(self, r: torch.Tensor) -> torch.Tensor:
            eye = torch.eye(r.shape[-1], dtype=r.dtype).expand(r.shape)
            return torch.linalg.solve_triangular(r, eye, upper=False)

        def working_entries(self, like: torch.Tensor) -> int:
            return 2 * m * block  # two blocks per piece: several pieces

    rng = np.random.default_rng(m + d)
    g, v = rng.standard_normal((m, d)), rng.standard_normal(d)
    want = dense_inverse(g, 0.05, block)
    f = FisherInverse(GpuLike(), torch.tensor(g), 0.05, block)
    np.testing.assert_allclose(f.diag().numpy(), np.diag(want), rtol=1e-10)
    np.testing.assert_allclose(f.mul(torch.tensor(v)).numpy(), want @ v, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("m", "block"), [(3, 8), (12, 8), (5, None)])
def test_diag_blocks_equal_dense_sub_blocks(m: int, block: int | None) -> None:
    rng = np.random.default_rng(m)
    g = rng.standard_normal((m, 16))
    want = dense_inverse(g, 0.1, block)
    got = FisherInverse(NUMPY_OPS, g, 0.1, block).diag_blocks(4)
    for j in range(4):
        np.testing.assert_allclose(got[j], want[4 * j:4 * j + 4, 4 * j:4 * j + 4], rtol=1e-10, atol=1e-12)


def test_damp_must_be_positive() -> None:
    with pytest.raises(ValueError, match="damp"):
        FisherInverse(NUMPY_OPS, np.ones((2, 3)), 0.0)


def test_obs_block4_follows_its_formulas() -> None:
    """Scores ½ w_bᵀ (F_b⁻¹)⁻¹ w_b per group of 4, the 2 lowest groups pruned, and
    ``w − F⁻¹ (x ⊙ P)`` with ``x = (F_b⁻¹)⁻¹ w_b``: computed here with dense NumPy."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, 8))
    g = rng.standard_normal((6, 16))
    finv = dense_inverse(g, 0.2, 8)
    x = np.concatenate([np.linalg.solve(finv[i:i + 4, i:i + 4], w.reshape(-1)[i:i + 4]) for i in range(0, 16, 4)])
    group_scores = [0.5 * w.reshape(-1)[i:i + 4] @ x[i:i + 4] for i in range(0, 16, 4)]
    pruned = np.argsort(group_scores)[:2]
    p = np.zeros(16, bool)
    for grp in pruned:
        p[4 * grp:4 * grp + 4] = True
    want = (w.reshape(-1) - finv @ (x * p)) * ~p
    f = FisherInverse(NUMPY_OPS, g, 0.2, 8)
    result = obs_step(NUMPY_OPS, [w], [np.ones_like(w, bool)], [f], [0.5], "block4", True)
    np.testing.assert_array_equal(result.masks[0].reshape(-1), ~p)
    np.testing.assert_allclose(result.weights[0].reshape(-1), want, rtol=1e-10, atol=1e-12)


RECIPE = """
modifiers:
  - !{type}
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.3
    final_sparsity: 0.6
    start_epoch: 1.0
    end_epoch: 3.0
    update_frequency: 1.0
{extra}
"""


def _mlp() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(8, 8))
    model.add_module("relu", torch.nn.ReLU())
    model.add_module("fc2", torch.nn.Linear(8, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _sampler(n: int = 16) -> dict:
    gen = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(n, 8, generator=gen), torch.randn(n, 4, generator=gen)
    return {"data_loader_builder": lambda kw: [([xs[i:i + 1]], {}, ys[i:i + 1]) for i in range(n)],
            "loss_function": torch.nn.functional.mse_loss}


def _train(recipe: str, steps: int = 16, **kwargs: object) -> torch.nn.Module:
    model, opt = _mlp()
    manager = ScheduledModifierManager.from_yaml(recipe)
    opt = manager.modify(model, opt, steps_per_epoch=4, **kwargs)
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(4, 8, generator=gen)), torch.randn(4, 4, generator=gen)).backward()
        opt.step()
    manager.finalize(model)
    return model


def _refusal(recipe: str, oneshot: bool = False, **kwargs: object) -> str:
    model, opt = _mlp()
    with pytest.raises(RecipeError) as info:  # at loading where validate reports it, else at modify()/apply()
        manager = ScheduledModifierManager.from_yaml(recipe)
        manager.apply(model, **kwargs) if oneshot else manager.modify(model, opt, steps_per_epoch=4, **kwargs)
    text = str(info.value)
    assert "M012" in text or "M009" in text
    return text


def test_both_mfac_spellings_prune_the_same() -> None:
    flat = RECIPE.format(type="MFACPruningModifier", extra="    num_grads: 4\n    fisher_block_size: 16\n    available_devices: [cpu]")
    seed = RECIPE.format(type="MFACPruningModifier",
                         extra="    mfac_options: {num_grads: 4, fisher_block_size: 16, available_gpus: [cpu]}")
    a, b = _train(flat), _train(seed)
    assert torch.equal(a.fc1.weight, b.fc1.weight) and torch.equal(a.fc2.weight, b.fc2.weight)
    assert int((a.fc1.weight == 0).sum()) == round(64 * 0.6)


def test_too_few_gradients_refused_with_location() -> None:
    text = _refusal(RECIPE.format(type="MFACPruningModifier", extra="    num_grads: 6"))
    assert text.startswith("<string>:10:") and "only 5 training steps" in text and "at most 5" in text


def test_window_slides_over_mask_updates() -> None:
    """8 gradients at the second pruning step, 4 steps after the first: the window holds the
    last 8 (SparseML emptied its buffer at every update and failed)."""
    model = _train(RECIPE.format(type="MFACPruningModifier", extra="    num_grads: {0.0: 5, 0.2: 8}\n    fisher_block_size: 16"))
    assert int((model.fc1.weight == 0).sum()) == round(64 * 0.6)


def test_obs_needs_a_grad_sampler() -> None:
    text = _refusal(RECIPE.format(type="OBSPruningModifier", extra="    num_grads: 4"))
    assert "grad_sampler" in text and "data_loader_builder" in text


def test_oneshot_mfac_without_sampler_refused() -> None:
    assert "no grad sampler" in _refusal(RECIPE.format(type="MFACPruningModifier", extra="    num_grads: 4"), oneshot=True)


def test_unsupported_mask_type_and_paging_refused() -> None:
    text = _refusal(RECIPE.format(type="MFACPruningModifier", extra="    mask_type: '2:4'\n    num_grads: 4\n    num_pages: 2"))
    assert "mask_type '2:4'" in text and "num_pages 2" in text


def test_dict_without_zero_refused() -> None:
    assert "0.0" in _refusal(RECIPE.format(type="MFACPruningModifier", extra="    num_grads: {0.5: 4}"))


def test_memory_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec_torch import second_order

    monkeypatch.setattr(second_order.TorchHost, "free_memory", lambda self, s: (1000, "the CPU's memory"))
    text = _refusal(RECIPE.format(type="MFACPruningModifier", extra="    num_grads: 4"))
    assert "needs about" in text and "Lower num_grads or fisher_block_size" in text


def test_oneshot_obs_and_mfac_reach_their_target() -> None:
    for kind, extra in (("OBSPruningModifier", "    num_grads: 8\n    fisher_block_size: 8\n    damp: 1.0e-3"),
                        ("MFACPruningModifier", "    num_grads: 8\n    damp: 1.0e-3")):
        model, _ = _mlp()
        ScheduledModifierManager.from_yaml(RECIPE.format(type=kind, extra=extra)).apply(model, grad_sampler=_sampler())
        zeros = int((model.fc1.weight == 0).sum()) + int((model.fc2.weight == 0).sum())
        assert zeros == round(96 * 0.6) if kind.startswith("OBS") else zeros == round(64 * 0.6) + round(32 * 0.6)
        assert model.fc1.weight.grad is None  # the sampler leaves no gradient behind


def test_short_sampler_is_an_error() -> None:
    model, _ = _mlp()
    manager = ScheduledModifierManager.from_yaml(RECIPE.format(type="OBSPruningModifier", extra="    num_grads: 32"))
    with pytest.raises(RuntimeError, match="ran out after 16 batches"):
        manager.apply(model, grad_sampler=_sampler(16))


def test_bad_grad_sampler_dict() -> None:
    model, _ = _mlp()
    manager = ScheduledModifierManager.from_yaml(RECIPE.format(type="OBSPruningModifier", extra="    num_grads: 4"))
    with pytest.raises(ValueError, match="data_loader_builder"):
        manager.apply(model, grad_sampler={"loss_function": torch.nn.functional.mse_loss})


def test_declared_settings_are_read() -> None:
    from recipe_spec.pruning.second_order.settings import settings_for

    m = loads(RECIPE.format(type="OBSPruningModifier", extra="    damp: 1e-5")).modifiers[0]
    s = settings_for(m)
    assert (s.damp, s.num_grads, s.block_size, s.global_sparsity, s.num_recomputations) == (1e-5, 1024, 1, True, 1)


def test_docs_examples_run() -> None:
    """docs/second-order.md: its Python blocks run in order, as one script."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "second-order.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", page, re.S | re.M)
    assert len(blocks) == 3
    namespace: dict = {}
    exec(compile("\n".join(blocks), "docs/second-order.md", "exec"), namespace)  # asserts inside
    assert int((namespace["model"].fc1.weight == 0).sum()) > 0


def test_resume_mid_window_is_bit_identical(tmp_path) -> None:
    """The gradient window and the previous step's sparsity are saved with the schedule, so a
    run stopped between two pruning steps ends exactly as an uninterrupted one."""
    recipe = RECIPE.format(type="MFACPruningModifier", extra="    num_grads: {0.0: 3, 0.2: 6}\n    fisher_block_size: 16")
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(4, 8, generator=gen), torch.randn(4, 4, generator=gen)) for _ in range(16)]

    def run(stop: int | None) -> torch.nn.Module:
        model, opt = _mlp()
        manager = ScheduledModifierManager.from_yaml(recipe)
        opt = manager.modify(model, opt, steps_per_epoch=4)
        for k, (x, y) in enumerate(batches):
            if k == stop:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "manager": manager.state_dict()}, tmp_path / "c.pt")
                model, opt = _mlp()
                manager = ScheduledModifierManager.from_yaml(recipe)
                opt = manager.modify(model, opt, steps_per_epoch=4)
                saved = torch.load(tmp_path / "c.pt", weights_only=False)
                manager.load_state_dict(saved["manager"])
                model.load_state_dict(saved["model"])
                opt.load_state_dict(saved["opt"])
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        manager.finalize(model)
        return model

    whole, resumed = run(None), run(10)
    assert torch.equal(whole.fc1.weight, resumed.fc1.weight) and torch.equal(whole.fc2.weight, resumed.fc2.weight)
    assert int((whole.fc1.weight == 0).sum()) == round(64 * 0.6)
