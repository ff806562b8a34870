"""A block's calibration and propagation calls compiled on Keras (``recipe_spec_keras.compiled``:
``jax.jit`` / ``tf.function``): the observed layers' inputs and the block's output are the
eager call's within float rounding, the blocks of one structure share one program, a block
that cannot be traced runs eagerly with the same result, and a whole run lands where the
eager run lands.

The file runs on the process's Keras backend (TensorFlow in the suite); ``test_keras_backends.py``
runs it again on JAX and torch (where nothing is compiled: every call runs eagerly).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_hub_cases import case, hf_folder, llama, needs_hub, plain_samples, samples  # noqa: E402

import recipe_spec  # noqa: E402

NAME = "02_sparsegpt_2of4"


def _compiles() -> bool:
    from recipe_spec_keras.compiled import compiled_backend

    return compiled_backend() is not None


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return hf_folder(tmp_path_factory.mktemp(NAME), NAME)


def _eager_inputs(block: object, layers: dict[str, object], args: tuple, kwargs: dict) -> tuple[object, dict]:
    """The block called eagerly, each named layer's first call argument recorded."""
    from recipe_spec_keras.oneshot_calls import wrapped

    got: dict[str, np.ndarray] = {}

    def recorder(key: str):  # noqa: ANN202
        def make(original):  # noqa: ANN001, ANN202
            def call(inputs, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
                got.setdefault(key, np.asarray(keras.ops.convert_to_numpy(inputs)))
                return original(inputs, *a, **k)
            return call
        return make

    import contextlib

    with contextlib.ExitStack() as stack:
        for key, layer in layers.items():
            stack.enter_context(wrapped(layer, recorder(key)))
        out = block(*args, **kwargs)
    return out, got


@needs_hub
def test_a_compiled_block_call_gives_the_eager_calls_inputs_and_output(folder: pathlib.Path) -> None:
    """Every observed input of each block (q/k/v's one array among them) and the block's output
    equal the eager call's within float rounding, 23 tokens each (on JAX the call is padded to
    24, masked, and cut back); the second block runs the first one's program (one trace)."""
    if not _compiles():
        pytest.skip("Keras on torch runs every block call eagerly")
    from recipe_spec_keras.compiled import CompiledBlock, signature

    model = llama(folder)
    backbone = model.backbone
    ids = np.asarray([s["input_ids"][:23] for s in samples(NAME)[:2]], "int32")  # JAX pads to 24 tokens
    mask = np.ones(ids.shape, bool)
    hidden = backbone.token_embedding(ids)
    blocks = backbone.transformer_layers
    assert signature(blocks[0]) == signature(blocks[1])

    def sublayers(block: object) -> dict[str, object]:
        attention = block._self_attention_layer
        return {"q": attention._query_dense, "k": attention._key_dense, "o": attention._output_dense,
                "gate": block._feedforward_gate_dense, "down": block._feedforward_output_dense}

    program = CompiledBlock(blocks[0], sublayers(blocks[0]), propagate=True)
    for block in blocks[:2]:
        out, arrays = program(block, (hidden,), {"decoder_padding_mask": mask})
        eager_out, eager = _eager_inputs(block, sublayers(block), (hidden,), {"decoder_padding_mask": mask})
        assert arrays["q"] is arrays["k"]  # one input, one array: its statistics share their products
        assert arrays["q"].shape[1] == 23 and np.shape(out)[1] == 23
        for key, value in eager.items():
            np.testing.assert_allclose(arrays[key], value, rtol=1e-5, atol=1e-5 * float(np.abs(value).max()))
        expected = keras.ops.convert_to_numpy(eager_out)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, rtol=1e-5,
                                   atol=1e-5 * float(np.abs(expected).max()))
        hidden = eager_out
    assert len(program._programs) == 1


@needs_hub
def test_a_run_compiles_one_program_per_pass_kind_and_lands_where_the_eager_run_lands(
        folder: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SparseGPT 2:4 over the two blocks: one program for the calibration passes and one for
    the propagation passes (shared by both blocks); the pruned weights are those of the eager
    run: each layer's zeros at least 99% the same, its kept weights within float rounding."""
    if not _compiles():
        pytest.skip("Keras on torch runs every block call eagerly")
    from recipe_spec_keras import oneshot as keras_oneshot

    made: list[object] = []
    original = keras_oneshot.KerasCalibrationHost._compiled

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        found = original(self, *args, **kwargs)
        if found is not None and all(found[0] is not m for m in made):
            made.append(found[0])
        return found

    def run() -> list[np.ndarray]:
        model = llama(folder)
        recipe_spec.oneshot(model=model, recipe=case(NAME)["recipe_yaml"], dataset=samples(NAME)[:4],
                            num_calibration_samples=4, shuffle_calibration_samples=False, progress=False)
        return [np.array(keras.ops.convert_to_numpy(v)) for v in model.weights]

    monkeypatch.setattr(keras_oneshot.KerasCalibrationHost, "_compiled", spy)
    compiled = run()
    assert sorted(p.propagate for p in made) == [False, True], made
    monkeypatch.setattr(keras_oneshot, "compiled_backend", lambda: None)
    eager = run()
    for a, b in zip(compiled, eager, strict=True):
        if a.ndim >= 2:
            assert float(np.mean((a == 0) == (b == 0))) >= 0.99
        kept = (a != 0) & (b != 0)
        np.testing.assert_allclose(a[kept], b[kept], rtol=1e-3, atol=1e-4)


class _Gated(keras.layers.Layer):
    """A block whose call branches in Python on a value: it cannot be traced."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(8, use_bias=False, name="dense")

    def build(self, input_shape: tuple) -> None:
        self.dense.build(input_shape)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def call(self, x: object) -> object:
        y = self.dense(x)
        return y if float(keras.ops.convert_to_numpy(keras.ops.sum(y))) > -1e30 else x


def test_a_block_that_cannot_be_traced_runs_eagerly() -> None:
    """A block whose call reads a value in Python is run eagerly, from its first call on: the
    pruned weights equal those of a run with nothing compiled."""
    from recipe_spec_keras import oneshot as keras_oneshot

    def model() -> object:
        keras.utils.set_random_seed(5)
        ids = keras.Input(shape=(None,), dtype="int32", name="ids")
        x = keras.layers.Embedding(40, 8, name="embed")(ids)
        x = _Gated(name="block_0")(x)
        x = _Gated(name="block_1")(x)
        return keras.Model(ids, x)

    data = plain_samples(3)
    recipe = "s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"

    def run() -> list[np.ndarray]:
        m = model()
        recipe_spec.oneshot(model=m, recipe=recipe, dataset=data, num_calibration_samples=3,
                            shuffle_calibration_samples=False, progress=False, sequential_targets=["_Gated"])
        return [np.array(keras.ops.convert_to_numpy(v)) for v in m.weights]

    ran: list[tuple[int, int]] = []
    compiled = keras_oneshot.run_compiled

    def spy(program, block, keys, inputs, *rest):  # noqa: ANN001, ANN002, ANN202
        ran.append((compiled(program, block, keys, inputs, *rest), len(inputs)))
        return ran[-1][0]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keras_oneshot, "run_compiled", spy)
        first = run()
    if _compiles():  # tried once, refused at the first call; then no block of its structure tries again
        assert ran == [(0, 3)], ran
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keras_oneshot, "compiled_backend", lambda: None)
        eager = run()
    assert sum(float(np.mean(w == 0)) >= 0.5 for w in first) == 2  # both blocks' kernels pruned
    for a, b in zip(first, eager, strict=True):
        np.testing.assert_array_equal(a, b)


def test_numpys_blas_takes_half_the_cores_while_blocks_are_compiled_and_gets_them_back() -> None:
    """Inside :func:`shared_cores` every BLAS library of the process runs on half the cores (at
    least one) where block calls are compiled, and on what it had before once it is left."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from recipe_spec_keras.compiled import _cores, shared_cores

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    before = blas_threads()
    with shared_cores():
        inside = blas_threads()
    assert blas_threads() == before
    expected = {max(1, _cores() // 2)} if _compiles() else before
    assert inside == expected, (inside, expected)


def test_bucket_lengths() -> None:
    """Calls are padded to the next of 4, 5, 6, 7 or 8 x 2^k tokens: at most a quarter more."""
    from recipe_spec_keras.compiled import bucket

    table = {1: 1, 16: 16, 17: 20, 23: 24, 100: 112, 128: 128, 129: 160, 256: 256, 257: 320, 1000: 1024, 2049: 2560}
    assert {n: bucket(n) for n in table} == table
    assert all(n <= bucket(n) <= max(16, n * 1.25) for n in range(1, 5000))


def test_only_calls_with_a_padding_mask_and_no_other_token_axis_are_padded() -> None:
    from recipe_spec_keras.compiled import padded

    hidden, mask = np.ones((1, 23, 4), np.float32), np.ones((1, 23), bool)
    tokens, args, kwargs = padded((hidden,), {"decoder_padding_mask": mask})
    assert tokens == 23 and args[0].shape == (1, 24, 4) and kwargs["decoder_padding_mask"].shape == (1, 24)
    assert not args[0][:, 23:].any() and not kwargs["decoder_padding_mask"][:, 23:].any()
    np.testing.assert_array_equal(args[0][:, :23], hidden)
    assert padded((hidden,), {}) is None  # no padding mask: padded tokens would be attended to
    assert padded((hidden,), {"mask": mask, "attention": np.ones((1, 23, 23), bool)}) is None
    assert padded((hidden[:, :24].repeat(2, 1)[:, :24],), {"m": np.ones((1, 24), bool)}) is None  # on a bucket


class _Act(keras.layers.Layer):
    def __init__(self, activation: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(8, activation=activation, name="dense")

    def build(self, input_shape: tuple) -> None:
        self.dense.build(input_shape)

    def call(self, x: object) -> object:
        return self.dense(x)


def test_blocks_share_a_program_only_when_they_compute_the_same() -> None:
    """Two blocks of one class and the same variables, one Dense with ReLU and one with GELU,
    are two structures (sharing a program would run the first one's activation for both);
    two with ReLU are one; names do not count."""
    from recipe_spec_keras.compiled import signature

    relu, gelu, relu_again = _Act("relu", name="a"), _Act("gelu", name="b"), _Act("relu", name="c")
    for block in (relu, gelu, relu_again):
        block.build((1, 4, 8))
    assert signature(relu) != signature(gelu)
    assert signature(relu) == signature(relu_again)
