"""M-FAC and OBS on Keras 3 (TensorFlow) against SparseML 1.8's own runs
(tests/data/conformance/sparseml-mfac/), on float64 Keras twins of the golden models.

The twins (TinyMLP: Dense 8->8 relu -> Dense 8->4; TinyCNN: Conv2D 2->3 3x3 relu, AvgPool 2,
flattened in PyTorch's (C, H, W) order, Dense 12->8 relu, Dense 8->4) get the golden
`initial_params` (PyTorch layout -> Keras layout) and are trained with `model.fit` on the golden
batches in order, `SGD(0.05, momentum=0.9)` and MSE, like the golden PyTorch loop. At every
step the masks (in canonical, PyTorch flat order) are identical to SparseML's, and so are the
scores, OBS-corrected weights and masks of every pruning event; weights agree within
:data:`TOL` relative (float64 Keras reaches about 1e-15 here).

Also: `recipe_spec_keras.second_order.fisher_inverse` against SparseML's inverse-Fisher classes
(case 00), XLA turned off with a warning for training-time M-FAC, one-shot M-FAC (case 10,
SparseML's bug) against the PyTorch backend, and the refusals.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from recipe_spec_keras.masks import to_torch_layout  # noqa: E402
from recipe_spec_keras.params import numpy_value  # noqa: E402
from recipe_spec_keras.second_order import fisher_inverse  # noqa: E402
from second_order_cases import recorded  # noqa: E402
from testdata import SPARSEML_MFAC  # noqa: E402

from recipe_spec import RecipeError, ScheduledModifierManager  # noqa: E402

FOLDER = SPARSEML_MFAC
#: relative tolerance on weights and OBS updates (float64 both sides), and on scores
TOL, SCORE_TOL = 1e-12, 1e-9
#: PyTorch name -> (Keras layer name, variable)
KERAS_NAMES = {"conv1.weight": "conv1/kernel", "fc1.weight": "fc1/kernel", "fc2.weight": "fc2/kernel"}
LAYER_TYPES = {"conv1.weight": "Conv2D", "fc1.weight": "Dense", "fc2.weight": "Dense"}


def load(stem: str) -> dict:
    return json.loads(next(FOLDER.glob(f"{stem}_*.json")).read_text())


@contextlib.contextmanager
def float64() -> Iterator[None]:
    """Layers, variables, losses and the optimizer in float64 inside (Keras caches its global
    dtype policy from ``floatx`` on first use, so both are set and restored)."""
    before, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_floatx(before)
        keras.config.set_dtype_policy(policy)


def twin(case: dict) -> keras.Model:
    """The case's model in Keras (float64), with the golden initial weights."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in case["initial_params"].items()}
    if case["model"] == "cnn":
        inputs = keras.Input((6, 6, 2))
        h = keras.layers.Conv2D(3, 3, name="conv1", activation="relu")(inputs)
        h = keras.layers.AveragePooling2D(2)(h)
        h = keras.layers.Permute((3, 1, 2))(h)  # (H, W, C) -> (C, H, W): PyTorch's flatten order
        h = keras.layers.Flatten()(h)
    else:
        inputs = keras.Input((8,))
        h = inputs
    h = keras.layers.Dense(8, name="fc1", activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc2")(h))
    if case["model"] == "cnn":
        model.get_layer("conv1").set_weights([p["conv1.weight"].reshape(3, 2, 3, 3).transpose(2, 3, 1, 0), p["conv1.bias"]])
    fc1_in = 12 if case["model"] == "cnn" else 8
    model.get_layer("fc1").set_weights([p["fc1.weight"].reshape(8, fc1_in).T, p["fc1.bias"]])
    model.get_layer("fc2").set_weights([p["fc2.weight"].reshape(4, 8).T, p["fc2.bias"]])
    return model


def sgd() -> keras.optimizers.Optimizer:
    """The golden ``SGD(lr=0.05, momentum=0.9)``. Keras' update (``m = μm − lr·g; w += m``) is
    torch's (``v = μv + g; w −= lr·v``) with ``m = −lr·v``; but Keras casts the Python float
    ``momentum`` through a float32 tensor (0.9 becomes 0.89999998), 3e-10 off torch after two
    steps: a NumPy float64 keeps it exact."""
    return keras.optimizers.SGD(0.05, momentum=np.float64(0.9))


def batches(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The golden batches (8 of 4), inputs channels-last."""
    d = case["data"]
    x = np.asarray(d["inputs"], dtype=np.float64).reshape(d["inputs_shape"])
    y = np.asarray(d["targets"], dtype=np.float64).reshape(d["targets_shape"])
    if x.ndim == 5:
        x = x.transpose(0, 1, 3, 4, 2)
    return x, y


def mse(out: Any, target: Any) -> Any:
    """torch's ``MSELoss()(out, target)`` in ``keras.ops`` (any Keras backend)."""
    return keras.ops.mean(keras.ops.square(keras.ops.subtract(out, target)))


def grad_sampler(case: dict) -> dict:
    """The golden grad sampler: the 32 samples in order, in batches of ``batch_size``."""
    x, y = batches(case)
    xs, ys = x.reshape(-1, *x.shape[2:]), y.reshape(-1, y.shape[-1])

    def build(kwargs: Any) -> list:
        bs = (kwargs or {}).get("batch_size", 1)
        return [([xs[i:i + bs]], {}, ys[i:i + bs]) for i in range(0, xs.shape[0], bs)]

    return {"data_loader_builder": build, "loss_function": mse}


def canonical(manager: Any, name: str, value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(to_torch_layout(np.asarray(value), LAYER_TYPES[name])).ravel()


def mask_zeros(manager: Any, name: str) -> list[int]:
    entry = manager.runtime.masks.params.get(KERAS_NAMES[name])
    return [] if entry is None else np.flatnonzero(~canonical(manager, name, entry.mask)).tolist()


def weights(manager: Any, name: str) -> np.ndarray:
    variable = manager.runtime._vars[KERAS_NAMES[name]][0]
    return canonical(manager, name, numpy_value(variable))


def close(got: Any, want: Any, what: str, tol: float | None = None) -> float:
    tol = TOL if tol is None else tol
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-300)
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert err <= tol, f"{what}: relative difference {err:.3e} > {tol:g}"
    return err


def check_events(case: dict, results: list[Any]) -> float:
    """The golden pruning events (canonical layout in the core): masks identical, scores and
    OBS-corrected weights close."""
    names = list(case["param_numel"])
    assert len(results) == len(case["events"])
    worst = 0.0
    for event, result in zip(case["events"], results, strict=True):
        for i, name in enumerate(names):
            assert np.flatnonzero(~result.masks[i].ravel()).tolist() == event["mask_zeros_after"][name], name
            worst = max(worst, close(result.weights[i].ravel(), event["weights_after_update"][name], f"update {name}"))
            got, want = result.scores[i].ravel().tolist(), event["scores"][name]
            if event["kind"] == "obs_score":  # null: -inf (already pruned)
                assert [w is None for w in want] == [math.isinf(g) for g in got], name
                got, want = [g for g, w in zip(got, want, strict=True) if w is not None], [w for w in want if w is not None]
            close(got, want, f"scores {name}", SCORE_TOL)
    return worst


def fit_rows(case: dict, manager: Any, model: Any, callbacks: list, epochs: range, rows: list[dict]) -> None:
    """``model.fit`` one epoch at a time on the golden batches, recording every step."""
    S = case["steps_per_epoch"]
    x, y = batches(case)
    names = list(case["param_numel"])

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            rows.append({n: (mask_zeros(manager, n), weights(manager, n)) for n in names})

    for epoch in epochs:
        order = [(epoch * S + b) % x.shape[0] for b in range(S)]
        model.fit(np.concatenate(x[order]), np.concatenate(y[order]), batch_size=x.shape[1], epochs=epoch + 1,
                  initial_epoch=epoch, shuffle=False, verbose=0, callbacks=[*callbacks, Record()])


def train(case: dict, **compile_options: Any) -> tuple[Any, list[dict], list[Any]]:
    """``model.fit`` on the twin, one ``fit`` per epoch on that epoch's golden batches; the
    masks (canonical zeros) and weights after every step, and the pruning events."""
    rows: list[dict] = []
    with float64(), recorded() as results:
        model = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        kwargs = {"grad_sampler": grad_sampler(case)} if case.get("grad_sampler") else {}
        model, optimizer, callbacks = manager.modify(model, sgd(), case["steps_per_epoch"], **kwargs)
        model.compile(optimizer=optimizer, loss="mse", **compile_options)
        fit_rows(case, manager, model, callbacks, range(case["epochs"]), rows)
        manager.finalize(model)
    return manager, rows, results


def check_steps(case: dict, rows: list[dict]) -> float:
    assert len(rows) == len(case["steps"])
    worst = 0.0
    for k, (row, want) in enumerate(zip(rows, case["steps"], strict=True)):
        for name, (zeros, value) in row.items():
            assert zeros == (want["mask_zeros"][name] if want["mask_enabled"] else []), f"mask of {name} at k={k}"
            assert not value[zeros].any(), f"{name} at k={k}: masked weights are not zero"
            worst = max(worst, close(value, want["weights"][name], f"{name} at k={k}"))
    return worst


@pytest.mark.parametrize("stem", ["02", "04", "14"])
def test_training_matches_sparseml(stem: str) -> None:
    """M-FAC buffering the training gradients (02: CNN, block 16 across parameters; 04: MLP,
    one block) and OBS with a grad sampler during training (14, whose pruning steps apply no
    optimizer update, as SparseML's sampler zeroes the step's gradients)."""
    case = load(stem)
    manager, rows, results = train(case)
    worst = max(check_steps(case, rows), check_events(case, results))
    for name in case["param_numel"]:
        close(weights(manager, name), case["final_weights"][name], f"final {name}")
    print(f"case {stem}: largest relative weight difference {worst:.2e}")


def test_obs_oneshot_matches_sparseml() -> None:
    """OBS one-shot with two recomputations (case 12), through ``manager.apply``."""
    case = load("12")
    with float64(), recorded() as results:
        model = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        manager.apply(model, grad_sampler=grad_sampler(case))
    check_events(case, results)
    assert not manager.runtime.masks.params  # finalized
    for name in case["param_numel"]:
        value = weights(manager, name)
        close(value, case["final_weights"][name], f"final {name}")
        assert float((value == 0).mean()) == case["final_sparsity"][name]


@pytest.mark.parametrize("result", load("00")["results"], ids=lambda r: f"{r['class']}-{r['block_size']}")
def test_fisher_inverse_matches_sparseml(result: dict) -> None:
    """``fisher_inverse`` (NumPy) against every SparseML inverse-Fisher class of case 00
    (SparseML's un-blocked PageSwap needs CUDA; its values are FisherInverseFast's)."""
    case = load("00")
    grads = np.asarray(case["grads"], dtype=np.float64)
    want = result if result.get("diag") is not None else next(r for r in case["results"] if r["class"] == "FisherInverseFast")
    before = grads.copy()
    f = fisher_inverse(grads, case["damp"], result["block_size"])
    close(f.diag(), want["diag"], "diag", SCORE_TOL)
    close(f.mul(np.asarray(case["v"], dtype=np.float64)), want["mul_v"], "mul", SCORE_TOL)
    assert np.array_equal(grads, before)


@pytest.mark.parametrize(("stem", "options"), [("04", {"run_eagerly": True}), ("04", {"jit_compile": True}),
                                             ("14", {"jit_compile": True})], ids=["mfac-eager", "mfac-xla", "obs-xla"])
def test_eager_and_xla(stem: str, options: dict) -> None:
    """Eager training hands the gradients over directly. A model compiled with XLA trains
    training-time M-FAC without it (one warning: Python cannot run inside XLA); OBS (and any
    sampled modifier) needs no gradient from the step and keeps XLA. All reproduce SparseML."""
    import warnings

    case = load(stem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager, rows, results = train(case, **options)
    turned_off = [w for w in caught if "jit_compile=False" in str(w.message)]
    xla_off = stem == "04" and bool(options.get("jit_compile"))
    assert len(turned_off) == int(xla_off)
    assert manager.runtime.model.jit_compile is (bool(options.get("jit_compile")) and not xla_off)
    check_steps(case, rows)
    check_events(case, results)


def test_mfac_custom_training_loop() -> None:
    """A ``tf.function`` step calling ``optimizer.apply``, between ``step_begin``/``step_end``."""
    import tensorflow as tf

    case = load("04")
    S, E = case["steps_per_epoch"], case["epochs"]
    x, y = batches(case)
    names = list(case["param_numel"])
    rows: list[dict] = []
    with float64(), recorded() as results:
        model = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        model, optimizer, _ = manager.modify(model, sgd(), S)

        @tf.function
        def step(xb: Any, yb: Any) -> None:
            with tf.GradientTape() as tape:
                loss = mse(model(xb, training=True), yb)
            optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

        for k in range(S * E):
            manager.runtime.step_begin()
            step(x[k % 8], y[k % 8])
            manager.runtime.step_end()
            rows.append({n: (mask_zeros(manager, n), weights(manager, n)) for n in names})
        manager.finalize(model)
    check_steps(case, rows)
    check_events(case, results)


def test_mfac_resumes_from_a_checkpoint_mid_window(tmp_path: Path) -> None:
    """Saved after step 7 (three gradients buffered since the step-4 pruning) and resumed from
    the ``.keras`` file and its recipe state: steps 8-15 are SparseML's."""
    from recipe_spec_keras.checkpoint import load_recipe_state

    case = load("04")
    S = case["steps_per_epoch"]
    rows: list[dict] = []
    with float64(), recorded() as results:
        model = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        model, optimizer, callbacks = manager.modify(model, sgd(), S)
        model.compile(optimizer=optimizer, loss="mse")
        checkpoint = manager.runtime.checkpoint_callback(str(tmp_path / "run-{epoch}.keras"))
        fit_rows(case, manager, model, [*callbacks, checkpoint], range(2), rows)
        model = keras.saving.load_model(checkpoint.saved[-1])
        model.optimizer.momentum = np.float64(0.9)  # see sgd()
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        model, _, callbacks = manager.modify(model, model.optimizer, S)
        manager.load_state_dict(load_recipe_state(checkpoint.saved[-1]))
        fit_rows(case, manager, model, callbacks, range(2, case["epochs"]), rows)
        manager.finalize(model)
    check_steps(case, rows)
    check_events(case, results)


def test_mfac_oneshot_matches_the_torch_backend() -> None:
    """One-shot M-FAC with a grad sampler (case 10: SparseML 1.8 failed, setting its sampler
    too late): the Keras twin gets the PyTorch backend's masks and weights."""
    torch = pytest.importorskip("torch")
    from test_second_order_conformance import _build

    case = load("10")
    net, _, _, _, sampler, _ = _build(case)
    ScheduledModifierManager.from_yaml(case["recipe"]).apply(net, grad_sampler=sampler)
    with float64():
        model = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        manager.apply(model, grad_sampler=grad_sampler(case))
    params = dict(net.named_parameters())
    for name in case["param_numel"]:
        want = params[name].detach().flatten().numpy()
        got = weights(manager, name)
        assert np.array_equal(got == 0, want == 0) and (want == 0).mean() == 0.5, name
        close(got, want, name)
    assert torch is not None


def test_refusals() -> None:
    """Too few training gradients before a pruning step, OBS without a grad sampler and
    one-shot M-FAC without one are M012 errors at modify()/apply(), located in the recipe."""
    with float64():
        for stem, oneshot in (("06", False), ("14", False), ("10", True)):
            case = load(stem)
            manager = ScheduledModifierManager.from_yaml(case["recipe"])
            with pytest.raises(RecipeError) as info:
                if oneshot:
                    manager.apply(twin(case))
                else:
                    manager.modify(twin(case), sgd(), case["steps_per_epoch"])
            assert "M012" in str(info.value) and str(info.value).startswith("<string>:"), stem


def test_training_mfac_errors_reach_fit() -> None:
    """An error where the compiled step hands its gradients over is raised by ``fit`` with
    its own type (here: the pruned kernels are frozen, so no step gives a gradient)."""
    from recipe_spec.pruning.second_order.pruner import SecondOrderError

    case = load("04")
    with float64():
        model = twin(case)
        for layer in ("fc1", "fc2"):
            model.get_layer(layer).kernel.trainable = False
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        model, optimizer, callbacks = manager.modify(model, sgd(), case["steps_per_epoch"])
        model.compile(optimizer=optimizer, loss="mse")
        with pytest.raises(SecondOrderError, match="only 0 training steps"):
            fit_rows(case, manager, model, callbacks, range(2), [])
        other = twin(case)
        manager = ScheduledModifierManager.from_yaml(case["recipe"])
        other, _, callbacks = manager.modify(other, sgd(), case["steps_per_epoch"])
        other.compile(optimizer=sgd(), loss="mse")  # not the optimizer modify() watches
        with pytest.raises(ValueError, match="compile with the optimizer modify"):
            fit_rows(case, manager, other, callbacks, range(1), [])


def test_jax_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keras' JAX trainer's gradients cannot leave its compiled step: refused at modify() and apply()."""
    case = load("04")
    with float64():
        model = twin(case)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(NotImplementedError, match="KERAS_BACKEND=tensorflow"):
        ScheduledModifierManager.from_yaml(case["recipe"]).modify(model, sgd(), case["steps_per_epoch"])
    with pytest.raises(NotImplementedError, match="KERAS_BACKEND=tensorflow"):
        ScheduledModifierManager.from_yaml(load("12")["recipe"]).apply(model, grad_sampler=grad_sampler(case))


TORCH_SCRIPT = """
import sys
sys.path.insert(0, "tests")
import keras
assert keras.backend.backend() == "torch"
import test_keras_second_order as t
t.TOL = t.SCORE_TOL = 1e-6  # Keras 3.15's float64 matmul on torch is float32-accurate
for stem in ("04", "14"):
    t.test_training_matches_sparseml(stem)
t.test_obs_oneshot_matches_sparseml()
print("TORCH-OK")
"""


def test_keras_on_torch() -> None:
    """``KERAS_BACKEND=torch`` (eager; the gradients are handed over directly, the grad
    sampler uses ``torch.autograd``): masks identical to SparseML's at every step. Weights
    only to ~1e-7: Keras' float64 ``matmul`` on torch loses float64 accuracy."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    env = {**os.environ, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", TORCH_SCRIPT], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and "TORCH-OK" in out.stdout, out.stderr[-4000:]


BLOCK4 = """
modifiers:
  - !OBSPruningModifier {params: [fc.weight], init_sparsity: 0.5, final_sparsity: 0.5, start_epoch: 0.0,
                         end_epoch: 1.0, update_frequency: 1.0, num_grads: 4, fisher_block_size: 8,
                         mask_type: block4, grad_sampler_kwargs: {batch_size: 2}}
"""


def test_obs_block4_groups_input_channels_like_torch() -> None:
    """OBS ``block4`` groups 4 *input* channels: a Keras Dense(8 -> 6) kernel (8, 6) is pruned
    as the PyTorch Linear(8, 6) weight (6, 8) is (same masks and weights); Dense(6 -> 8), whose
    6 inputs do not group by 4, is refused (M012, the PyTorch shape in the message)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w, x, y = rng.normal(size=(6, 8)), rng.normal(size=(8, 8)), rng.normal(size=(8, 6))
    net = torch.nn.Sequential()
    net.add_module("fc", torch.nn.Linear(8, 6, bias=False).double())
    with torch.no_grad():
        net.fc.weight.copy_(torch.from_numpy(w))
    loader = [([torch.from_numpy(x[i:i + 2])], {}, torch.from_numpy(y[i:i + 2])) for i in range(0, 8, 2)]
    ScheduledModifierManager.from_yaml(BLOCK4).apply(net, grad_sampler={
        "data_loader_builder": lambda kw: loader, "loss_function": torch.nn.functional.mse_loss})
    want = net.fc.weight.detach().numpy()
    with float64():
        inputs = keras.Input((8,))
        model = keras.Model(inputs, keras.layers.Dense(6, name="fc", use_bias=False)(inputs))
        model.get_layer("fc").set_weights([w.T])
        ScheduledModifierManager.from_yaml(BLOCK4).apply(model, grad_sampler={
            "data_loader_builder": lambda kw: [([x[i:i + 2]], {}, y[i:i + 2]) for i in range(0, 8, 2)],
            "loss_function": mse})
        got = numpy_value(model.get_layer("fc").kernel).T
        assert np.array_equal(got == 0, want == 0) and (want == 0).mean() == 0.5
        assert (want.reshape(6, 2, 4) == 0).all(-1).sum() == 6  # whole groups of 4 inputs
        close(got, want, "block4 weights")
        inputs = keras.Input((6,))
        model = keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs))
        with pytest.raises(RecipeError, match=r"M012.*'fc/kernel' of shape \[8, 6\]"):
            ScheduledModifierManager.from_yaml(BLOCK4).apply(model, grad_sampler={
                "data_loader_builder": lambda kw: [], "loss_function": mse})
