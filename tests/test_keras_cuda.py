"""Keras 3 on a GPU, on the JAX and torch backends: a small GMP ``fit`` in a subprocess per
backend (Keras picks its backend once per process), on a GPU (``cuda``) and, for reference, on
the CPU: both end with exactly the recipe's share of zeros, the GPU run must give the CPU run's
masks exactly and its weights within float32 round-off, and must really have run on the GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from keras_subprocess import BACKENDS, run_script

#: the GPU only: each GPU run makes its CPU reference itself, and the same recipes run on the CPU
#: on every backend in the other Keras test files (a process per backend costs seconds)
DEVICES = [pytest.param("cuda", marks=pytest.mark.cuda)]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    from recipe_spec import ScheduledModifierManager

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16,))
    h = keras.layers.Dense(32, activation="relu", name="fc1")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc2")(h))
    init = np.random.default_rng(0)  # Keras's torch backend draws kernels on the GPU, from another stream
    for w in model.weights:
        if w.path.endswith("kernel"):
            w.assign((init.normal(size=tuple(w.shape)) * w.shape[0] ** -0.5).astype("float32"))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 16)).astype("float32")
    y = (x @ rng.normal(size=(16, 4)) / 4).astype("float32")
    manager = ScheduledModifierManager.from_yaml('''
    modifiers:
      - !GMPruningModifier {params: [fc1/kernel, fc2/kernel], init_sparsity: 0.25, final_sparsity: 0.75,
                            start_epoch: 0, end_epoch: 2, update_frequency: 0.5}
    ''')
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.05, momentum=0.9), steps_per_epoch=4)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0, callbacks=callbacks)
    manager.finalize(model)
    backend = keras.backend.backend()
    if backend == "jax":
        import jax
        device = jax.devices()[0].platform
    else:
        device = model.get_layer("fc1").kernel.value.device.type
    np.savez(sys.argv[1], **{n: model.get_layer(n).get_weights()[0] for n in ("fc1", "fc2")})
    print(json.dumps({"device": device}))
    """
)


def _fit(backend: str, device: str, tmp: Path) -> tuple[str, dict[str, np.ndarray]]:
    """Run the fit on ``backend``, on the CPU or the GPU; the device it ran on and the kernels."""
    report, kernels = run_script(SCRIPT, backend, device, tmp)
    return report["device"], kernels


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_keras_fit_on_device(backend: str, device: str, tmp_path: Path) -> None:
    ran_on, kernels = _fit(backend, device, tmp_path)
    if device == "cuda" and backend == "jax" and ran_on == "cpu":
        pytest.skip("jax has no GPU backend here (pip install 'jax[cuda12]')")
    assert ran_on in (("cpu",) if device == "cpu" else ("gpu", "cuda")), ran_on
    for name, kernel in kernels.items():
        zeros = kernel == 0
        assert int(zeros.sum()) == round(0.75 * kernel.size), name
        assert np.abs(kernel[zeros]).max(initial=0) == 0 and np.abs(kernel[~zeros]).min() > 0, name
    if device != "cpu":
        _, ref = _fit(backend, "cpu", tmp_path)
        for name in ref:
            assert np.array_equal(ref[name] == 0, kernels[name] == 0), name
            np.testing.assert_allclose(kernels[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)
