"""Keras per-step overhead of a recipe whose masks are held, in one long ``fit``, against the
bare model in the same run, for two model sizes.

A conv net on 32x32x3 inputs (four 3x3 convolutions of ``width``, ``2 width``, ``4 width``,
``4 width`` channels with BatchNorm and pooling, then two Dense layers), SGD with momentum.
The managed model holds GMP masks (50%) on every prunable kernel, with the next mask update
far beyond the measured steps: every step is a step with no event, where the masks are
enforced inside the compiled train step and nothing per weight runs outside it. The sizes:

- ``small``: width 32, batch 64;
- ``large``: width 128, batch 256;
- ``tiny`` (not run by default): width 4, batch 8, a step of well under a millisecond on a
  CPU, where the trainer's own work per step (dispatch, the state it carries) weighs as it
  does for the small size on a fast GPU.

For each size, the bare and the managed model (same weights) each run ``--rounds`` long fits
of ``--steps`` steps, alternating which goes first. A step's time is the interval between
consecutive ``on_train_batch_begin`` (one whole step, callbacks included); per fit the median
interval (the first two steps dropped), per round the managed median over the bare one;
on JAX also the compiled step's structure (:func:`jax_step_structure`), and with
``--step-pairs`` the train step alone (:func:`step_pairs`);
printed: the median ratio over rounds (the figure; target under 3%) and its range, both
models' median step times, and the same ratio of the process's CPU time per step (the work
done, which other processes on a busy machine disturb less than the wall clock). After the fits the masked weights are checked to be exactly 0.

    python benchmarks/bench_keras_overhead.py [--keras-backend tensorflow|jax|torch]
        [--sizes tiny small large] [--steps 60] [--rounds 5] [--step-pairs 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if "--keras-backend" in sys.argv:  # Keras reads KERAS_BACKEND once, at import
    os.environ["KERAS_BACKEND"] = sys.argv[sys.argv.index("--keras-backend") + 1]
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

SIZES = {"tiny": (4, 8), "small": (32, 64), "large": (128, 256)}

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.5
    final_sparsity: 0.9
    start_epoch: 0
    end_epoch: 100
    update_frequency: 10
"""


def cnn(width: int) -> keras.Model:
    L = keras.layers
    inputs = keras.Input((32, 32, 3))
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(width, 3, padding="same")(inputs)))
    h = L.MaxPooling2D(2)(L.ReLU()(L.BatchNormalization()(L.Conv2D(2 * width, 3, padding="same")(h))))
    h = L.MaxPooling2D(2)(L.ReLU()(L.BatchNormalization()(L.Conv2D(4 * width, 3, padding="same")(h))))
    h = L.Flatten()(L.AveragePooling2D(2)(L.ReLU()(L.Conv2D(4 * width, 3, padding="same")(h))))
    h = L.Dense(256, activation="relu")(h)
    return keras.Model(inputs, L.Dense(10)(h))


class Stamps(keras.callbacks.Callback):
    """``perf_counter()`` and the process's CPU time at every batch begin."""

    def __init__(self) -> None:
        super().__init__()
        self.begin: list[float] = []
        self.cpu: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begin.append(time.perf_counter())
        self.cpu.append(time.process_time())


def median_step(model: keras.Model, callbacks: list, x, y, batch: int, steps: int) -> tuple[float, float, float]:
    """(median wall seconds per step over the fit's steps from the third, CPU seconds per
    step, the whole fit's wall seconds per step). On a GPU the host may queue steps ahead of
    the device; the whole fit ends with its losses read back, so its mean holds the device's
    own pace too."""
    stamps = Stamps()
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
              callbacks=[stamps, *callbacks])
    whole = (time.perf_counter() - start) / steps
    cpu = (stamps.cpu[-1] - stamps.cpu[2]) / (len(stamps.cpu) - 3)
    return statistics.median(np.diff(stamps.begin[2:])), cpu, whole


def jax_step_structure(model: keras.Model, x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """Keras on JAX: (arrays of the train step's state, operations its compiled program launches:
    the entry computation's fusions, convolutions, products and copies, each one kernel on a
    GPU) for one batch of ``x``, ``y``. The trainer pays per state array on the host every step."""
    import re

    import jax

    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
              model.metrics_variables)
    state = tuple(tuple(v.value for v in group) for group in groups)
    text = jax.jit(model.train_step, donate_argnums=0).lower(state, (x, y)).compile().as_text()
    entry = text[text.index("\nENTRY "):]
    entry = entry[:entry.index("\n}")]
    ops = re.findall(r"^\s+(?:ROOT )?\S+ = \S+ ([\w-]+)\(", entry, re.M)
    free = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant"}
    return sum(len(s) for s in state), sum(op not in free for op in ops)


def step_pairs(bare: keras.Model, model: keras.Model, x: np.ndarray, y: np.ndarray, pairs: int, size: str) -> None:
    """The train step alone, ``pairs`` times each model alternating (``train_on_batch``: the
    compiled step with the recipe's masking in it, no fit around it and no callback; the
    callback's own time is in the fits' figure): median ratio of the pairs' wall times."""
    bare.train_on_batch(x, y)
    model.train_on_batch(x, y)
    ratios, cpu_ratios = [], []
    for i in range(pairs):
        got = {}
        for m in ((bare, model) if i % 2 == 0 else (model, bare)):
            wall, cpu = time.perf_counter(), time.process_time()
            m.train_on_batch(x, y)
            got[id(m)] = (time.perf_counter() - wall, time.process_time() - cpu)
        ratios.append(got[id(model)][0] / got[id(bare)][0])
        cpu_ratios.append(got[id(model)][1] / got[id(bare)][1])
    med = statistics.median
    print(f"{size}: the step alone, {pairs} pairs: {(med(ratios) - 1) * 100:+.2f}% (pairs "
          f"{(min(ratios) - 1) * 100:+.2f}% .. {(max(ratios) - 1) * 100:+.2f}%), CPU time {(med(cpu_ratios) - 1) * 100:+.2f}%")


def measure(size: str, args: argparse.Namespace) -> None:
    width, batch = SIZES[size]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = batch * max(args.steps, 4)
    x = rng.normal(size=(n, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(n,))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    bare = cnn(width)
    bare.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9), loss=loss)
    model = cnn(width)
    model.set_weights(bare.get_weights())
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    # one epoch = 10,000 steps: the step-0 prune, then no event in the measured fits
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(learning_rate=0.01, momentum=0.9), 10_000)
    model.compile(optimizer=optimizer, loss=loss)
    median_step(bare, [], x, y, batch, 4)  # tracing, and the managed run's step-0 prune
    median_step(model, callbacks, x, y, batch, 4)
    ratios, cpu_ratios, whole_ratios, bare_t, managed_t = [], [], [], [], []
    for r in range(args.rounds):
        order = ((bare, []), (model, callbacks)) if r % 2 == 0 else ((model, callbacks), (bare, []))
        got = {id(m): median_step(m, cb, x, y, batch, args.steps) for m, cb in order}
        bare_t.append(got[id(bare)][0])
        managed_t.append(got[id(model)][0])
        ratios.append(got[id(model)][0] / got[id(bare)][0])
        cpu_ratios.append(got[id(model)][1] / got[id(bare)][1])
        whole_ratios.append(got[id(model)][2] / got[id(bare)][2])
    if args.step_pairs:
        step_pairs(bare, model, x[:batch], y[:batch], args.step_pairs, size)
    if keras.backend.backend() == "jax":
        (bare_arrays, bare_ops), (arrays, ops) = (jax_step_structure(m, x[:batch], y[:batch]) for m in (bare, model))
        print(f"{size}: the compiled step carries {arrays} state arrays (bare: {bare_arrays}) and launches "
              f"{ops} operations (bare: {bare_ops})")
    masks = manager.runtime.masks.params
    for entry in masks.values():
        value = keras.ops.convert_to_numpy(entry.variable.value)
        assert not value[~entry.mask].any(), f"{entry.name}: masked weights are not zero after the fits"
    held = sum(int(e.mask.size) for e in masks.values())
    params = sum(int(np.prod(v.shape)) for v in model.weights)
    med = statistics.median
    print(f"{size}: width {width}, batch {batch}, {params:,} parameters, {len(masks)} masked kernels "
          f"({held:,} weights, 50% pruned); {args.rounds} rounds of one {args.steps}-step fit each")
    print(f"    bare    {med(bare_t) * 1e3:9.2f} ms/step   managed {med(managed_t) * 1e3:9.2f} ms/step   "
          f"(+{(med(managed_t) - med(bare_t)) * 1e3:.2f} ms)")
    print(f"    overhead {(med(ratios) - 1) * 100:+.2f}%  (rounds {(min(ratios) - 1) * 100:+.2f}% .. "
          f"{(max(ratios) - 1) * 100:+.2f}%; target < 3%); masked weights exactly 0: yes")
    print(f"    CPU time per step: {(med(cpu_ratios) - 1) * 100:+.2f}% (rounds {(min(cpu_ratios) - 1) * 100:+.2f}% .. "
          f"{(max(cpu_ratios) - 1) * 100:+.2f}%; the work done, steadier than wall time on a busy machine)")
    print(f"    whole fit per step: {(med(whole_ratios) - 1) * 100:+.2f}% (rounds {(min(whole_ratios) - 1) * 100:+.2f}% .. "
          f"{(max(whole_ratios) - 1) * 100:+.2f}%; ends with the losses read back: the device's pace)")


def device_name() -> str:
    """Where the model's weights live: the GPU's name, or "cpu"."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    import tensorflow as tf

    return "GPU" if tf.config.list_logical_devices("GPU") else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["small", "large"])
    parser.add_argument("--steps", type=int, default=60, help="steps of each long fit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step-pairs", type=int, default=0,
                        help="also time the train step alone (train_on_batch), this many pairs")
    parser.add_argument("--keras-backend", choices=("tensorflow", "jax", "torch"), default=None)
    args = parser.parse_args()
    if args.steps < 6 or args.rounds < 1:
        parser.error("--steps needs at least 6 and --rounds at least 1")
    print(f"keras {keras.__version__} ({keras.backend.backend()}) on {device_name()}")
    for size in args.sizes:
        measure(size, args)


if __name__ == "__main__":
    main()
