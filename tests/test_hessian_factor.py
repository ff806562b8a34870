"""The step SparseGPT and GPTQ share before their column loop, made on its own
(:func:`recipe_spec.oneshot.shared.obs.factor_hessian`) and, on a host that asks for it, ahead on
a second thread while the module before is solved; and the two NumPy primitives of the solve
that work in place (the rank-1 update into a reused buffer, the inverse's factor without
mirroring). Each is checked against the plain computation it replaces, bit for bit, and the
factor against torch's ``cholesky(cholesky_inverse(L), upper=True)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from recipe_spec.masks.numpy_ops import NUMPY_OPS
from recipe_spec.oneshot.gptq.solve import gptq_quantize
from recipe_spec.oneshot.shared.obs import factor_hessian, sparsegpt_prune
from recipe_spec.quantization import QuantArgs


def _hessian(columns: int, dead: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(4 * columns, columns)).astype(np.float32)
    x[:, list(dead)] = 0.0
    return (x.T @ x) / np.float32(4 * columns)


def _lower(h: np.ndarray) -> np.ndarray:
    return np.linalg.cholesky(h.astype(np.float64)).astype(np.float32)


# -- the NumPy primitives ------------------------------------------------------------------------
def test_subtract_outer_is_the_plain_products_subtracted_bit_for_bit_whatever_sizes_came_before() -> None:
    """``x[start:] -= a ⊗ b``: each entry ``x - a[i]·b[j]`` rounded twice, as the plain
    NumPy expression (and torch's ``outer`` then ``sub_``) give it; the buffer reused across
    calls of growing and shrinking sizes never leaks values from one call to the next."""
    rng = np.random.default_rng(1)
    for rows, cols, start in [(7, 300, 2), (40, 1000, 0), (3, 5, 1), (40, 1000, 39)]:
        x = rng.normal(size=(rows, cols)).astype(np.float32)
        a = rng.normal(size=rows - start).astype(np.float32)
        b = rng.normal(size=cols).astype(np.float32)
        want = x.copy()
        want[start:] = want[start:] - a[:, None] * b[None, :]
        got = NUMPY_OPS.subtract_outer(x, start, a, b)
        np.testing.assert_array_equal(got, want)
        assert got is x  # in place


def test_subtract_outer_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec_torch.masks import TORCH_OPS

    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 200)).astype(np.float32)
    a, b = rng.normal(size=60).astype(np.float32), rng.normal(size=200).astype(np.float32)
    ours = NUMPY_OPS.subtract_outer(x.copy(), 4, a, b)
    theirs = TORCH_OPS.subtract_outer(torch.from_numpy(x.copy()), 4, torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.mark.parametrize("columns", [6, 257])
def test_numpy_inverse_upper_factor_is_the_mirrored_inverses_factor_bit_for_bit(columns: int) -> None:
    """LAPACK's ``potri`` then ``potrf`` on the inverse's lower triangle: the same bits as
    factoring the mirrored whole inverse (what NumPy did before), and ``uᵀ·u`` is the inverse
    of ``L·Lᵀ`` within float32 rounding of a float64 computation."""
    scipy_lapack = pytest.importorskip("scipy.linalg.lapack")
    lower = _lower(_hessian(columns) + np.eye(columns, dtype=np.float32))
    u = NUMPY_OPS.inverse_upper_factor(lower)
    assert u is not None and u.flags.c_contiguous
    inv, info = scipy_lapack.spotri(lower, lower=1)
    assert info == 0
    whole = np.tril(inv) + np.tril(inv, -1).T
    factor, info = scipy_lapack.spotrf(whole, lower=1, clean=1)
    assert info == 0
    np.testing.assert_array_equal(u, factor.T)
    assert not np.tril(u, -1).any()
    l64 = lower.astype(np.float64)
    want = np.linalg.inv(l64 @ l64.T)
    np.testing.assert_allclose(u.astype(np.float64).T @ u, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_inverse_upper_factor_matches_torch_and_the_fallback_without_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec.masks import numpy_ops
    from recipe_spec_torch.masks import TORCH_OPS

    lower = _lower(_hessian(40) + np.eye(40, dtype=np.float32))
    ours = NUMPY_OPS.inverse_upper_factor(lower)
    theirs = TORCH_OPS.inverse_upper_factor(torch.from_numpy(lower))
    assert ours is not None and theirs is not None
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(numpy_ops, "_scipy", lambda kind, name, like: None)
    plain = NUMPY_OPS.inverse_upper_factor(lower)
    assert plain is not None
    np.testing.assert_allclose(plain, ours, rtol=1e-4, atol=1e-5)


# -- the factor made on its own ------------------------------------------------------------------
W4 = QuantArgs(num_bits=4, strategy="group", group_size=16, symmetric=True)


@pytest.mark.parametrize("actorder", [None, "static", "group"])
@pytest.mark.parametrize("dead", [(), (3, 17)])
def test_gptq_with_a_factor_made_ahead_is_gptq_bit_for_bit(actorder: str | None, dead: tuple[int, ...]) -> None:
    """The factor made by :func:`factor_hessian` (ordered for an activation order) and handed to
    ``gptq_quantize`` gives exactly the weights, qparams, groups, loss and report of the solve
    that factors the Hessian itself; dead columns are still zeroed after the observer."""
    rng = np.random.default_rng(3)
    w = rng.normal(scale=0.05, size=(24, 48)).astype(np.float32)
    h = _hessian(48, dead)
    plain = gptq_quantize(NUMPY_OPS, w, h, args=W4, block_size=16, actorder=actorder)
    factor = factor_hessian(NUMPY_OPS, h, 0.01, ordered=actorder is not None)
    ahead = gptq_quantize(NUMPY_OPS, w, None, args=W4, block_size=16, actorder=actorder, factor=factor)
    np.testing.assert_array_equal(ahead.weight, plain.weight)
    np.testing.assert_array_equal(ahead.scale, plain.scale)
    np.testing.assert_array_equal(ahead.zero_point, plain.zero_point)
    assert (ahead.g_idx, ahead.loss, ahead.dead_columns, ahead.report) == \
        (plain.g_idx, plain.loss, plain.dead_columns, plain.report)
    assert ahead.dead_columns == len(dead)
    if dead:
        assert not ahead.weight[:, list(dead)].any()


def test_sparsegpt_with_a_factor_made_ahead_is_sparsegpt_bit_for_bit() -> None:
    rng = np.random.default_rng(4)
    w = rng.normal(size=(16, 32)).astype(np.float32)
    h = _hessian(32, (5,))
    plain = sparsegpt_prune(NUMPY_OPS, w, h, sparsity=0.5, prune_n=2, prune_m=4, block_size=8)
    ahead = sparsegpt_prune(NUMPY_OPS, w, None, sparsity=0.5, prune_n=2, prune_m=4, block_size=8,
                            factor=factor_hessian(NUMPY_OPS, h, 0.01))
    np.testing.assert_array_equal(ahead.weight, plain.weight)
    np.testing.assert_array_equal(ahead.mask, plain.mask)
    assert (ahead.loss, ahead.dead_columns, ahead.report) == (plain.loss, plain.dead_columns, plain.report)


def test_a_factor_of_the_wrong_width_or_settings_is_refused() -> None:
    w = np.ones((4, 8), np.float32)
    factor = factor_hessian(NUMPY_OPS, _hessian(8), 0.01)
    with pytest.raises(ValueError, match="made for 8 columns with .* not 8 with"):
        gptq_quantize(NUMPY_OPS, w, None, args=W4.__class__(num_bits=4, strategy="channel"), actorder="static",
                      factor=factor)  # made unordered, asked ordered
    with pytest.raises(ValueError, match="made for 8 columns"):
        sparsegpt_prune(NUMPY_OPS, np.ones((4, 16), np.float32), None, sparsity=0.5, factor=factor)
    with pytest.raises(ValueError, match="give the Hessian or its factor"):
        sparsegpt_prune(NUMPY_OPS, w, None, sparsity=0.5)
    from recipe_spec.oneshot.shared.obs import SolverError

    with pytest.raises(SolverError, match="the Hessian holds 64 NaN"):
        factor_hessian(NUMPY_OPS, np.full((8, 8), np.nan, np.float32), 0.01)


# -- made ahead in a run -------------------------------------------------------------------------
def _run_keras(recipe: str, ahead: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[np.ndarray], list[Any]]:
    keras = pytest.importorskip("keras")
    from keras_hub_cases import plain_samples
    from recipe_spec_keras import oneshot as keras_oneshot

    import recipe_spec

    monkeypatch.setattr(keras_oneshot.KerasCalibrationHost, "solves_ahead", ahead)
    keras.utils.set_random_seed(7)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(40, 16, name="embed")(ids)
    for i in range(2):
        x = keras.layers.Dense(32, use_bias=False, name=f"up_{i}")(x)
        x = keras.layers.Dense(16, use_bias=False, name=f"down_{i}")(x)
    model = keras.Model(ids, x)
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=plain_samples(4), num_calibration_samples=4,
                        shuffle_calibration_samples=False, progress=False)
    modes = [layer.quantization_mode for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    return [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights], modes


@pytest.mark.parametrize("modifier", [
    "SparseGPTModifier:\n      sparsity: 0.5\n      targets: [Dense]",
    "GPTQModifier:\n      config_groups:\n        g:\n          targets: [Dense]\n          weights: {num_bits: 4, "
    "type: int, symmetric: true, strategy: channel, actorder: static}",
])
def test_a_keras_run_with_the_factors_made_ahead_is_the_run_without(modifier: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The Keras host makes each Hessian's factor on a second thread while the layer before is
    solved: the model it leaves is the one a run factoring each in its turn leaves, bit for bit."""
    recipe = f"s_stage:\n  s_modifiers:\n    {modifier}\n"
    made: list[Any] = []
    from recipe_spec.oneshot import pipeline

    original = pipeline.prepare_module

    def spy(*args: Any) -> Any:
        made.append(original(*args))
        return made[-1]

    monkeypatch.setattr(pipeline, "prepare_module", spy)
    ahead, modes = _run_keras(recipe, True, monkeypatch)
    assert len(made) == 4 and all(m is not None for m in made)  # one factor per Dense layer
    plain, plain_modes = _run_keras(recipe, False, monkeypatch)
    assert len(made) == 4  # none made ahead by a host that does not ask
    for a, b in zip(ahead, plain, strict=True):
        np.testing.assert_array_equal(a, b)
    if "GPTQ" in modifier:
        assert modes == plain_modes == ["int4"] * 4
    else:
        assert sum(float(np.mean(a == 0)) >= 0.5 for a in ahead) == 4  # every kernel pruned


@pytest.mark.parametrize("modifier", [
    "SparseGPTModifier:\n      sparsity: 0.5\n      mask_structure: '2:4'\n      targets: [Dense]",
    "WandaPruningModifier:\n      sparsity: 0.5\n      targets: [Dense]",
    "GPTQModifier:\n      config_groups:\n        g:\n          targets: [Dense]\n          weights: {num_bits: 4, "
    "type: int, symmetric: false, strategy: group, group_size: 8, actorder: weight}",
])
def test_a_keras_run_solved_on_keras_tensors_is_the_run_solved_on_numpy(modifier: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``RECIPE_SPEC_KERAS_SOLVES=keras`` (what an accelerator gets by default): the solves run on
    this process's Keras backend's tensors, factors made ahead on a second thread included, and
    leave the model the NumPy solves leave: the same pruned entries and grid values, the weights
    within float32 rounding (carried into the next layer's inputs)."""
    from recipe_spec_keras import solver_ops

    recipe = f"s_stage:\n  s_modifiers:\n    {modifier}\n"
    used: list[str] = []
    original = solver_ops.KerasOps.cholesky

    def spy(self: Any, a: Any) -> Any:
        used.append(type(a).__module__)
        return original(self, a)

    monkeypatch.setattr(solver_ops.KerasOps, "cholesky", spy)
    monkeypatch.setenv(solver_ops.SOLVES_VARIABLE, "numpy")
    plain, plain_modes = _run_keras(recipe, True, monkeypatch)
    assert not used
    monkeypatch.setenv(solver_ops.SOLVES_VARIABLE, "keras")
    tensors, modes = _run_keras(recipe, True, monkeypatch)
    # a factor and its inverse's factor per Dense layer (Wanda factors nothing), none on NumPy
    assert len(used) == (0 if "Wanda" in modifier else 8) and not any(m.startswith("numpy") for m in used), used
    assert modes == plain_modes
    for a, b in zip(tensors, plain, strict=True):
        np.testing.assert_array_equal(a == 0, b == 0)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_place_to_solve_that_is_not_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("keras")
    from recipe_spec_keras import solver_ops

    monkeypatch.setenv(solver_ops.SOLVES_VARIABLE, "gpu")
    with pytest.raises(ValueError, match="RECIPE_SPEC_KERAS_SOLVES='gpu' is not a place to solve: write auto"):
        solver_ops.solver_for()
    assert solver_ops.solver_for("numpy") is None
    assert solver_ops.solver_for("keras").ops is solver_ops.KERAS_OPS
    assert (solver_ops.solver_for("auto") is None) == (not solver_ops.on_accelerator())


def test_a_factor_that_fails_ahead_fails_in_its_own_turn_naming_its_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factorisation made ahead that raises is raised when its layer is solved, with that
    layer's location, after the layers before it were compressed."""
    from recipe_spec.oneshot.shared import obs

    original = obs.inverse_hessian_factor
    calls: list[int] = []

    def failing(ops: Any, hessian: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(hessian.shape[0]))
        if int(hessian.shape[0]) == 32:  # the down layers' Hessians
            raise obs.SolverError("the Hessian is not positive definite (test)")
        return original(ops, hessian, *args, **kwargs)

    monkeypatch.setattr(obs, "inverse_hessian_factor", failing)
    with pytest.raises(obs.SolverError, match=r"down_0.*not positive definite \(test\).*no later layer was compressed"):
        _run_keras("s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n      targets: [Dense]\n",
                   True, monkeypatch)
    assert calls[0] == 16  # up_0 was factored (and solved) first
