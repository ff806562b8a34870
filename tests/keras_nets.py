"""The Keras twin of the conformance net (tests/torch_nets.py, and each conformance case's
``Net``), and copying PyTorch weights into it so that both compute the same function."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

#: A recipe that sets the LR and weight decay and prunes, for the tests that drive it from
#: ``fit`` and from custom training loops (test_keras_loops.py, test_keras_jax.py): it runs
#: LOOP_EPOCHS epochs of LOOP_STEPS steps on :func:`loop_data`, batch 4.
LOOP_RECIPE = """
modifiers:
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 3}
  - !SetWeightDecayModifier {weight_decay: 0.001, start_epoch: 1}
  - !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.1, final_sparsity: 0.75,
                        start_epoch: 0.5, end_epoch: 2, update_frequency: 0.5}
"""
LOOP_STEPS, LOOP_EPOCHS = 4, 3


def loop_data() -> tuple[np.ndarray, np.ndarray]:
    """One epoch of inputs for the twin (12x12x3) and targets (10), batch 4."""
    rng = np.random.default_rng(0)
    n = LOOP_STEPS * 4
    return rng.normal(size=(n, 12, 12, 3)).astype("float32"), rng.normal(size=(n, 10)).astype("float32")


#: PyTorch name -> the twin's Keras path, for the four prunable weights
PRUNABLE = {"conv1.weight": "conv1/kernel", "conv2.weight": "conv2/kernel", "fc1.weight": "fc1/kernel", "fc2.weight": "fc2/kernel"}


def keras_twin(out: int = 10) -> keras.Model:
    """conv1 -> bn1 -> relu -> conv2 -> relu -> pool -> fc1 -> relu -> fc2, channels last,
    input 12x12x3, with the PyTorch net's layer names (so recipes match by portable alias)."""
    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 3, name="conv1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1", epsilon=1e-5, momentum=0.9)(x)  # torch's defaults
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(16, 3, name="conv2")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.AveragePooling2D(4)(x)  # AdaptiveAvgPool2d(2) on 8x8
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(32, name="fc1", activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(out, name="fc2")(x))


def _fc1_order(channels: int) -> np.ndarray:
    """PyTorch flattens (C, H, W), Keras (H, W, C): Keras input (h*2 + w)*C + c is PyTorch
    input c*4 + h*2 + w."""
    return np.array([c * 4 + h * 2 + w for h in range(2) for w in range(2) for c in range(channels)])


def copy_weights(net, model: keras.Model, same_function: bool = True) -> None:
    """A PyTorch net's weights into its twin: kernels transposed to Keras layout, BN
    statistics copied, and ``fc1``'s inputs permuted, so that the twin computes the same
    function as ``net``.

    ``same_function=False`` leaves ``fc1``'s kernel the transposed PyTorch weight element for
    element instead: the two then compute different functions, but every kernel holds the same
    values at the same (transposed) places, so masks (block masks included) compare position
    by position."""
    # copies: on JAX a Keras variable set from a NumPy array may share its memory, and the
    # torch net's BatchNorm would then update the twin's statistics in place
    sd = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    for name in ("conv1", "conv2"):
        model.get_layer(name).set_weights([sd[f"{name}.weight"].transpose(2, 3, 1, 0), sd[f"{name}.bias"]])
    model.get_layer("bn1").set_weights([sd["bn1.weight"], sd["bn1.bias"], sd["bn1.running_mean"], sd["bn1.running_var"]])
    fc1 = sd["fc1.weight"]
    if same_function:
        fc1 = fc1[:, _fc1_order(fc1.shape[1] // 4)]
    model.get_layer("fc1").set_weights([fc1.T, sd["fc1.bias"]])
    model.get_layer("fc2").set_weights([sd["fc2.weight"].T, sd["fc2.bias"]])


def to_torch_layout(kernel: np.ndarray) -> np.ndarray:
    """A Keras kernel (or mask) in the PyTorch weight's layout (``same_function=False``
    copies): ``(kh, kw, in, out)`` -> ``(out, in, kh, kw)``, ``(in, out)`` -> ``(out, in)``."""
    return kernel.transpose(3, 2, 0, 1) if kernel.ndim == 4 else kernel.T
