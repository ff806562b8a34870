"""The one-shot solvers' operations on Keras's own tensors (``recipe_spec_keras.solver_ops``),
against NumPy's (:data:`recipe_spec.masks.numpy_ops.NUMPY_OPS`, which the solvers' conformance
tests hold to llm-compressor's numbers): the exact float operations (``frexp``, ``ldexp``, FP8
rounding, subnormals included), the writes that return new tensors, and a division that XLA
would turn into a product with a reciprocal. Run on this process's Keras backend, and again on
JAX in a subprocess (``test_the_same_on_jax``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from recipe_spec_keras.solver_ops import KERAS_OPS  # noqa: E402

from recipe_spec.masks.numpy_ops import NUMPY_OPS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _t(a: np.ndarray) -> object:
    return keras.ops.convert_to_tensor(a)


def _n(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _floats(seed: int = 0) -> np.ndarray:
    """float32 values over the whole range: normal, subnormal, zeros of both signs, extremes."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(4000) * 10.0 ** rng.integers(-37, 38, 4000)
    subnormal = rng.integers(1, 1 << 23, 500) * 2.0 ** -149 * np.where(rng.random(500) < 0.5, -1, 1)
    edges = [0.0, -0.0, 2.0 ** -149, 2.0 ** -126, 2.0 ** -126 - 2.0 ** -149, 448.0, -448.0, 0.5, 1.0,
             3.4e38, -3.4e38]
    return np.concatenate([normal, subnormal, edges]).astype(np.float32)


def test_frexp_is_numpys_bit_for_bit() -> None:
    x = _floats()
    m, e = NUMPY_OPS.frexp(x)
    km, ke = KERAS_OPS.frexp(_t(x))
    np.testing.assert_array_equal(_n(km), m)
    np.testing.assert_array_equal(_n(ke), e)
    assert np.array_equal(np.signbit(_n(km)), np.signbit(m))


def test_ldexp_is_numpys_bit_for_bit_into_the_subnormals() -> None:
    rng = np.random.default_rng(1)
    m = ((rng.random(20000) * 0.5 + 0.5) * np.where(rng.random(20000) < 0.5, -1, 1)).astype(np.float32)
    e = rng.integers(-175, 128, 20000).astype(np.float32)
    # the halfway cases of the subnormal rounding: ties go to the even fraction
    m = np.concatenate([m, np.float32([0.5 + 2.0 ** -24, 0.75, 0.5, 0.625, -0.875, 0.75])])
    e = np.concatenate([e, np.float32([-149, -149, -149, -150, -148, -148])])
    with np.errstate(over="ignore"):
        want = NUMPY_OPS.ldexp(m, e)
    got = _n(KERAS_OPS.ldexp(_t(m), _t(e)))
    np.testing.assert_array_equal(got, want)
    assert (got[-6:] != 0).sum() == 4 and np.array_equal(np.signbit(got), np.signbit(want))


def test_fp8_rounding_is_numpys() -> None:
    x = np.clip(_floats(2), -448, 448)
    np.testing.assert_array_equal(_n(KERAS_OPS.round_fp8_e4m3(_t(x))), NUMPY_OPS.round_fp8_e4m3(x))


def test_a_division_by_one_value_is_a_division() -> None:
    """``divide`` and the grid's ``x / scale`` with one scale give IEEE quotients (XLA would
    multiply by the reciprocal of a broadcast scalar)."""
    from recipe_spec.quantization import QuantArgs
    from recipe_spec.quantization.grid import quantize

    x = np.random.default_rng(3).standard_normal(50000).astype(np.float32)
    np.testing.assert_array_equal(_n(KERAS_OPS.divide(_t(x), 7.5)), x / np.float32(7.5))
    scale = np.float32([0.0123])
    args = QuantArgs(8, "int", True, "tensor")
    np.testing.assert_array_equal(_n(quantize(KERAS_OPS, _t(x), _t(scale), None, args)),
                                  quantize(NUMPY_OPS, x, scale, None, args))


def test_writes_return_new_tensors_with_numpys_values() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    a, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    cases = [
        ("assign", lambda ops, v: ops.assign(v, (slice(1, 3), 2), 7.0)),
        ("assign row", lambda ops, v: ops.assign(v, (4,), v[0] * 2)),
        ("subtract", lambda ops, v: ops.subtract(v, (slice(None), slice(3, None)), v[:, :2] * 0.5)),
        ("subtract_outer", lambda ops, v: ops.subtract_outer(v, 2, ops.cast(a, v), ops.cast(b, v))),
        ("add_diagonal", lambda ops, v: ops.add_diagonal(v[:5], 0.25)),
        ("add_diagonal values", lambda ops, v: ops.add_diagonal(v[:5], v[5])),
        ("scale_add", lambda ops, v: ops.scale_add(v, 0.75, v * v)),
        ("put", lambda ops, v: ops.put(ops.reshape(v, (30,)), np.array([3, 0, 29]), v[0, :3])),
    ]
    for name, write in cases:
        given = _t(x)
        got = _n(write(KERAS_OPS, given))
        np.testing.assert_array_equal(got, write(NUMPY_OPS, x.copy()), err_msg=name)
        np.testing.assert_array_equal(_n(given), x, err_msg=f"{name} wrote into its input")


def test_masks_and_orders_are_numpys() -> None:
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, (7, 12)).astype(np.float32)  # many ties: the order must be stable
    np.testing.assert_array_equal(_n(KERAS_OPS.argsort_last(_t(scores))), NUMPY_OPS.argsort_last(scores))
    index = NUMPY_OPS.argsort_last(scores)[:, :5]
    flags = np.ones((7, 12), bool)
    np.testing.assert_array_equal(_n(KERAS_OPS.scatter_last(_t(flags), _t(index), False)),
                                  NUMPY_OPS.scatter_last(flags.copy(), index, False))
    keep, more = rng.random(40) < 0.3, rng.random(40) < 0.3
    np.testing.assert_array_equal(_n(KERAS_OPS.or_prefix(_t(keep), _t(more), 25)),
                                  NUMPY_OPS.or_prefix(keep.copy(), more, 25))
    np.testing.assert_array_equal(_n(KERAS_OPS.set_true(_t(keep), _t(np.array([0, 39])))),
                                  NUMPY_OPS.set_true(keep.copy(), np.array([0, 39])))
    np.testing.assert_array_equal(_n(KERAS_OPS.flat_nonzero(_t(more))), np.flatnonzero(more))
    flat = rng.standard_normal(999).astype(np.float32)
    assert float(_n(KERAS_OPS.kth_direct(_t(flat), 500))) == float(NUMPY_OPS.kth_direct(flat, 500))
    assert KERAS_OPS.count_nonzero(_t(keep)) == int(keep.sum())


def test_factors_are_numpys_within_float32_rounding_and_refuse_what_numpy_refuses() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 16))
    h = (x.T @ x / 64 + 0.1 * np.eye(16)).astype(np.float32)
    lower = KERAS_OPS.cholesky(_t(h))
    np.testing.assert_allclose(_n(lower), NUMPY_OPS.cholesky(h), rtol=1e-5, atol=1e-6)
    upper = KERAS_OPS.inverse_upper_factor(lower)
    np.testing.assert_allclose(_n(upper), NUMPY_OPS.inverse_upper_factor(NUMPY_OPS.cholesky(h)), rtol=1e-4,
                               atol=1e-5)
    inverse = _n(KERAS_OPS.lower_inverse(lower))
    np.testing.assert_allclose(inverse @ _n(lower), np.eye(16), atol=1e-5)
    assert KERAS_OPS.cholesky(_t(-h)) is None  # not positive definite: None on every backend
    with pytest.raises(ValueError, match="slices of step 1"):
        KERAS_OPS.assign(_t(h), (slice(0, 8, 2),), 0.0)


@pytest.mark.slow
def test_the_same_on_jax() -> None:
    """This file's tests again on Keras's JAX backend (XLA: its own divisions, flushed
    subnormals), in a process of its own."""
    pytest.importorskip("jax")
    if keras.backend.backend() == "jax":
        pytest.skip("this process already runs on JAX")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                           "-k", "not test_the_same_on_jax"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "7 passed" in done.stdout, done.stdout[-2000:]
