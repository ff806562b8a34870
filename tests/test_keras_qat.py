"""Keras QAT: the conv-BN fold agrees with the PyTorch backend's, is skipped where a deployed conv
could not absorb the BN, and a saved QAT structure restores (or says which layers are missing).
Resuming a QAT run from ``model.save`` checkpoints is in test_keras_resume.py."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from keras_nets import copy_weights, keras_twin  # noqa: E402
from torch_nets import build  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

# -- conv-BN fold: Keras against PyTorch ------------------------------------------------------


def _twin() -> keras.Model:
    """``torch_nets.Net`` (8 outputs) in Keras, with torch's BatchNorm epsilon and momentum."""
    return keras_twin(out=8)


def _pair(fuse: bool) -> dict:
    """The torch net and its Keras twin with the same weights and BN statistics, QAT started by
    the recipe on both, one training-mode forward on the same batch."""
    tmodel, _, inputs, _ = build()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        # BN statistics far from the initial (gamma 1, variance 1), so that the fold factor
        # gamma / sqrt(var + eps) spreads over two decades and changes the kernel's grid;
        # one negative gamma checks the sign goes through
        tmodel.bn1.weight.copy_(torch.rand(8, generator=g) * 2 + 0.3)
        tmodel.bn1.weight[0] *= -1
        tmodel.bn1.bias.copy_(torch.randn(8, generator=g))
        tmodel.bn1.running_mean.copy_(torch.randn(8, generator=g))
        tmodel.bn1.running_var.copy_(10 ** (torch.rand(8, generator=g) * 3 - 2))
    model = _twin()
    sd = {k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()}
    copy_weights(tmodel, model)  # fc1's inputs permuted: the same function
    recipe = "modifiers:\n  - !QuantizationModifier {start_epoch: 0%s}\n" % ("" if fuse else ", model_fuse_fn_name: no_fuse")
    tman = ScheduledModifierManager.from_yaml(recipe)
    tman.modify(tmodel, torch.optim.SGD(tmodel.parameters(), lr=0.1), 4)
    tman.runtime.before_step()  # the step-0 events: QAT starts
    kman = ScheduledModifierManager.from_yaml(recipe)
    kman.modify(model, keras.optimizers.SGD(0.1), 4)
    kman.runtime.step_begin()
    x = inputs[0]
    tmodel.train()
    with torch.no_grad():
        tout = tmodel(x).numpy()
    kout = keras.ops.convert_to_numpy(model(x.numpy().transpose(0, 2, 3, 1), training=True))
    tfq, kfq = tmodel.conv1.weight_fake_quant, model.get_layer("conv1").kernel_fake_quant
    kbn = model.get_layer("bn1")
    fc2_in = model.get_layer("fc2").input_fake_quant
    return {
        "torch": tout, "keras": kout,
        "folded": (dict(tman.runtime.quantization.folded), dict(kman.runtime.quantization.folded)),
        "grid": ((float(tfq.min_val), float(tfq.max_val)), (float(kfq.min_val.numpy()), float(kfq.max_val.numpy()))),
        "kernel_range": (float(sd["conv1.weight"].min()), float(sd["conv1.weight"].max())),
        "bn": ((tmodel.bn1.running_mean.numpy(), tmodel.bn1.running_var.numpy()),
               (kbn.moving_mean.numpy(), kbn.moving_variance.numpy())),
        "bn_mean_before": sd["bn1.running_mean"],
        "fc2_step": (float(fc2_in.max_val.numpy()) - min(float(fc2_in.min_val.numpy()), 0.0)) / 255,
        "fc2_wmax": float(np.abs(model.get_layer("fc2").kernel.numpy()).max()),
    }


def test_conv_bn_fold_matches_pytorch() -> None:
    folded, plain = _pair(fuse=True), _pair(fuse=False)
    assert folded["folded"] == ({"conv1": "bn1"}, {"conv1": "bn1"})
    assert plain["folded"] == ({}, {})
    # the folded kernel's quantization grid: the range of kernel * factor, the same in both,
    # and not the plain kernel's range (which is what the unfolded runs quantize with)
    (t_grid, k_grid), (p_t_grid, p_k_grid) = folded["grid"], plain["grid"]
    np.testing.assert_allclose(k_grid, t_grid, rtol=1e-6)
    np.testing.assert_allclose(p_k_grid, p_t_grid, rtol=1e-6)
    np.testing.assert_allclose(p_k_grid, folded["kernel_range"], rtol=1e-6)
    assert abs(k_grid[1] - p_k_grid[1]) > 0.1 * abs(p_k_grid[1])
    # the BN still runs after the folded conv: the same batch means go into the moving means
    # (not compared: the moving variances, torch's takes the unbiased batch variance, Keras'
    # the biased one)
    (t_mean, _), (k_mean, _) = folded["bn"]
    np.testing.assert_allclose(k_mean, t_mean, rtol=1e-5, atol=1e-6)
    assert not np.allclose(k_mean, folded["bn_mean_before"])
    # Outputs. Torch's fake-quant multiplies by 1/scale where Keras divides by scale, so a value
    # lying exactly on a rounding boundary may round the other way in one framework: one such
    # flip at fc2's input moves an output by one input step times a fc2 weight, and a flip
    # deeper in the net reaches the output damped by the layers after it. A flipped value that
    # is an observer's minimum or maximum also moves that layer's grid by a fraction of a step
    # (JAX's BatchNorm, 1e-6 from torch's, flips one at conv2's input here). The tolerance is
    # two such steps (about 4e-4 here); the frameworks agree far closer when nothing flips.
    step = folded["fc2_step"] * folded["fc2_wmax"]
    fold_gap = np.abs(folded["keras"] - folded["torch"]).max()
    plain_gap = np.abs(plain["keras"] - plain["torch"]).max()
    fold_effect = np.abs(folded["keras"] - plain["keras"]).max()
    assert fold_gap <= 2 * step, (fold_gap, step)
    assert plain_gap <= 2 * step, (plain_gap, step)
    # the fold changes the output by several tolerances: a missing or wrong fold would show
    assert fold_effect > 3 * step, (fold_effect, step)
    assert np.abs(folded["torch"] - plain["torch"]).max() > 3 * step


def test_fold_is_skipped_through_an_activation() -> None:
    """A conv with a non-linear activation before its BN cannot absorb the BN when deployed."""
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.Conv2D(4, 3, name="conv2")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    model = keras.Model(inputs, x)
    manager = ScheduledModifierManager.from_yaml("modifiers:\n  - !QuantizationModifier {start_epoch: 0}\n")
    manager.modify(model, keras.optimizers.SGD(0.1), 1)
    manager.runtime.step_begin()
    state = manager.runtime.quantization
    assert state.folded == {"conv2": "bn2"} and state.bns == ["bn2"]
    state.freeze_bn_stats()
    assert model.get_layer("bn2").momentum == 1.0 and model.get_layer("bn1").momentum != 1.0


def test_restore_names_missing_layers_and_reads_states_without_fold() -> None:
    """A state from another model is refused with the layers it lacks; a state saved before the
    fold existed (no ``folded``, no observer values) resumes unfolded, as it was trained."""
    from recipe_spec_keras.quantization import QuantizationState, qat_layers

    with pytest.raises(ValueError, match=r"does not have: conv9 .*keras.saving.load_model"):
        QuantizationState.restore(_twin(), {"converted": ["conv1", "conv9"]})
    model = _twin()
    old = {"converted": ["conv1", "fc1"], "bns": ["bn1"], "observers_disabled": False,
           "bn_frozen": True, "bn_momentum": {"bn1": 0.9}}
    state = QuantizationState.restore(model, old)
    assert [layer.name for layer in qat_layers(model)] == ["conv1", "fc1"]
    assert state.folded == {} and state.bns == ["bn1"] and model.get_layer("bn1").momentum == 1.0
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 12, 12, 3)).astype("float32")
    bn = [rng.uniform(0.3, 2, 8), rng.normal(size=8), rng.normal(size=8), 10 ** rng.uniform(-2, 1, 8)]
    model.get_layer("bn1").set_weights([v.astype("float32") for v in bn])  # a fold would show
    unfolded, folded = _twin(), _twin()
    for twin, fold in ((unfolded, {}), (folded, {"conv1": "bn1"})):
        twin.set_weights([w.numpy() for w in model.weights if "fake_quant" not in w.path])
        QuantizationState.restore(twin, {**old, "folded": fold})
    out = keras.ops.convert_to_numpy(model(x, training=True))
    np.testing.assert_array_equal(out, keras.ops.convert_to_numpy(unfolded(x, training=True)))
    assert not np.allclose(out, keras.ops.convert_to_numpy(folded(x, training=True)))


def test_fold_with_a_pruned_gamma_stays_finite() -> None:
    """A BN gamma pruned to 0 under a conv-BN fold: the fold divides the conv output by
    gamma / std again, and 0 / 0 was NaN. That channel keeps its own kernel, and the BN's output
    there is its beta, as BN's formula says (gamma * x_hat + beta with gamma = 0)."""
    model = _twin()
    bn = model.get_layer("bn1")
    gamma = bn.gamma.numpy()
    gamma[1] = 0.0
    bn.gamma.assign(gamma)
    bn.beta.assign(np.array([0.5, -0.25, 1.0, 2.0, 0.0, 0.1, 0.2, 0.3], dtype="float32"))
    manager = ScheduledModifierManager.from_yaml("modifiers:\n  - !QuantizationModifier {start_epoch: 0}\n")
    manager.modify(model, keras.optimizers.SGD(0.1), 4)
    manager.runtime.step_begin()
    assert dict(manager.runtime.quantization.folded) == {"conv1": "bn1"}
    x = np.random.default_rng(0).normal(size=(2, 12, 12, 3)).astype("float32")
    upto_bn = keras.Model(model.input, bn.output)
    out = keras.ops.convert_to_numpy(upto_bn(x, training=True))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[..., 1], -0.25, rtol=0, atol=1e-6)
    assert np.isfinite(keras.ops.convert_to_numpy(model(x, training=True))).all()
