"""``recipe_spec.oneshot`` on Keras 3 changes nothing before everything is checked, and a run
that fails leaves the model as it was (the PyTorch side: ``test_oneshot_preflight.py``).

Each refusal path runs on a fresh plain functional model (Embedding(40, 16), Dense,
EinsumDense, Dense head); every variable (bit for bit), each layer's quantization mode and one
forward output are compared before and after. The file runs on the process's Keras backend
(TensorFlow in the suite); ``test_keras_backends.py`` runs it again on JAX and torch, where an
id outside the vocabulary would otherwise be read silently (JAX clamps it) or wrap around.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_hub_cases import plain_model, plain_samples  # noqa: E402

import recipe_spec  # noqa: E402

SPARSEGPT = "s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, targets: [Linear], ignore: [head]}\n"
W8A8 = ("q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W8A8\n      targets: [Linear]\n"
        "      ignore: [head]\n")
RECIPES = {"sparsegpt": SPARSEGPT, "gptq-w8a8": W8A8}
PROBE = np.arange(10, dtype="int32").reshape(1, 10)


class Snapshot:
    def __init__(self, model: Any):
        self.values = [np.array(keras.ops.convert_to_numpy(v), copy=True) for v in model.weights]
        self.names = [v.path for v in model.weights]
        self.modes = [getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()]
        self.output = np.asarray(keras.ops.convert_to_numpy(model(PROBE, training=False)))

    def assert_same(self, model: Any) -> None:
        after = Snapshot(model)
        assert after.names == self.names and after.modes == self.modes
        differ = [n for n, a, b in zip(self.names, self.values, after.values, strict=True) if not np.array_equal(a, b)]
        assert not differ, differ
        np.testing.assert_array_equal(after.output, self.output)


def _refused(recipe: str, exc: type[BaseException], match: str, model: Any = None, **kwargs: Any) -> None:
    model = model if model is not None else plain_model()
    before = Snapshot(model)
    kwargs.setdefault("dataset", plain_samples())
    with pytest.raises(exc, match=match):
        recipe_spec.oneshot(model=model, recipe=recipe, **kwargs)
    before.assert_same(model)


BAD_DATA = {
    "id outside the vocabulary": ([{"input_ids": [1, 2, 40]}], ValueError, "outside the model's vocabulary of 40"),
    "negative id": ([{"input_ids": [1, -1, 3]}], ValueError, "token id -1 is negative"),
    "float ids": ([{"input_ids": np.array([1.0, 2.0], dtype=np.float32)}], TypeError, "token ids are integers"),
    "empty sample": ([{"input_ids": np.zeros(0, dtype=np.int64)}], ValueError, "is empty"),
    "mask longer than ids": ([{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1, 1]}], ValueError,
                             "one value per token"),
    "a text column left in": ([{"input_ids": [1, 2], "text": "hi"}], TypeError, "'text' is str"),
}


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("case", BAD_DATA)
def test_bad_calibration_data_is_refused_before_the_model_changes(recipe: str, case: str) -> None:
    data, exc, match = BAD_DATA[case]
    _refused(RECIPES[recipe], exc, match, dataset=data)


def test_bad_arguments_and_unknown_sequential_targets_are_refused() -> None:
    _refused(SPARSEGPT, TypeError, "num_calibration_samples=4", num_calibration_samples="4")
    _refused(SPARSEGPT, TypeError, "batch_size must be an int", batch_size=1.5)
    _refused(SPARSEGPT, ValueError, "'NoSuchLayer'.*no such class or module", sequential_targets=["NoSuchLayer"])


def test_a_non_finite_weight_in_a_later_layer_is_refused_before_the_first_changes() -> None:
    model = plain_model()
    heads = model.get_layer("heads")
    kernel = np.array(keras.ops.convert_to_numpy(heads.kernel))
    kernel[0, 0, 0] = np.inf
    heads.kernel.assign(kernel)
    fc1 = np.array(keras.ops.convert_to_numpy(model.get_layer("fc1").kernel))
    with pytest.raises(ValueError, match="non-finite values.*heads"):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=plain_samples())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("fc1").kernel), fc1)


@pytest.mark.parametrize("recipe,folder,where", [(SPARSEGPT, "sparsegpt", "sparsegpt_prune"),
                                                 (W8A8, "gptq", "record_quantized")])
def test_a_failure_during_the_run_puts_the_model_back(monkeypatch: pytest.MonkeyPatch, recipe: str,
                                                      folder: str, where: str) -> None:
    """The second layer's solve fails: the first (and every scheme recorded) is undone, and no
    layer becomes a Keras quantized layer."""
    import importlib

    compress = importlib.import_module(f"recipe_spec.oneshot.{folder}")
    real, seen = getattr(compress, where), []

    def failing(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) >= 2:
            raise RuntimeError("the solve failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(compress, where, failing)
    _refused(recipe, RuntimeError, "the solve failed")
    assert len(seen) == 2


def test_an_already_quantized_model_is_not_quantized_again() -> None:
    model = plain_model()
    recipe_spec.oneshot(model=model, recipe=W8A8, dataset=plain_samples())
    assert model.get_layer("fc1").quantization_mode == "int8"
    _refused(W8A8, recipe_spec.RecipeError, "B001.*already quantized", model=model)


def test_a_quantization_recipe_that_targets_an_embedding_is_refused() -> None:
    """Keras runs quantize Dense and EinsumDense layers: a scheme whose targets match an
    Embedding layer is refused, naming it, before anything changes (not left unquantized)."""
    recipe = W8A8.replace("targets: [Linear]", "targets: [Embedding]")
    _refused(recipe, recipe_spec.RecipeError, "B001.*the recipe quantizes this Embedding layer")


def test_an_endless_generator_is_read_to_its_first_samples() -> None:
    """As on PyTorch: a generator that never ends gives the run of its first samples."""
    import itertools

    first = plain_samples(3)

    def endless() -> Any:
        for i in itertools.count():
            yield first[i % 3] if i < 3 else {"input_ids": [i % 40] * 5}

    results = []
    for data in (endless(), first):
        model = plain_model()
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=data, num_calibration_samples=3,
                            shuffle_calibration_samples=False)
        results.append([np.array(keras.ops.convert_to_numpy(v)) for v in model.weights])
    assert all(np.array_equal(a, b) for a, b in zip(*results, strict=True))


@pytest.mark.parametrize("kind", ["sequential", "layer"])
def test_a_model_that_is_not_built_is_refused(kind: str) -> None:
    """An unbuilt Keras model holds no weights: refused with how to build it, not a run that
    compresses nothing; the model stays unbuilt."""
    model = (keras.Sequential([keras.layers.Embedding(40, 16), keras.layers.Dense(16), keras.layers.Dense(40)])
             if kind == "sequential" else keras.layers.Dense(4))
    with pytest.raises(ValueError, match="is not built .*model.build"):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=plain_samples())
    assert not model.built
