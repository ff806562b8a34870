"""Keras backend costs, in one run.

(a) Per-step overhead of the recipe callback against plain ``model.fit`` on a small CNN (about
0.77M parameters, batch 32 of 32x32x3, SGD). The recipe holds GMP masks on every prunable
kernel with the next update far away (masks enforced by assignment before and after each step)
and sets the LR with a function modifier every step. Two identical models, one bare and one
managed, each run ``fit(epochs=1, steps_per_epoch=--steps)`` alternately; the figure is the
median over rounds of each round's managed/bare ratio. Target: overhead under 5%.

(b) One mask update: ``recipe_spec_keras.masks.compute_mask`` (unstructured) on the kernels of
a ResNet-50-sized list (the 53 conv + 1 dense kernel shapes, about 25.5M weights), against
``keras.ops.top_k`` (k = kept weights, per kernel) and ``np.sort`` of ``|w|`` on the same arrays.

    KERAS_BACKEND=tensorflow python benchmarks/bench_keras.py [--steps 50 --rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from recipe_spec_keras.masks import compute_mask  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.5
    final_sparsity: 0.9
    start_epoch: 0
    end_epoch: 100
    update_frequency: 50
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 100}
"""


def cnn() -> keras.Model:
    L = keras.layers
    inputs = keras.Input((32, 32, 3))
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding="same")(inputs)))
    h = L.MaxPooling2D(2)(L.ReLU()(L.BatchNormalization()(L.Conv2D(64, 3, padding="same")(h))))
    h = L.MaxPooling2D(2)(L.ReLU()(L.BatchNormalization()(L.Conv2D(128, 3, padding="same")(h))))
    h = L.Flatten()(L.AveragePooling2D(2)(L.ReLU()(L.Conv2D(128, 3, padding="same")(h))))
    h = L.Dense(256, activation="relu")(h)
    return keras.Model(inputs, L.Dense(10)(h))


def fit_time(model: keras.Model, x, y, steps: int, callbacks: list) -> float:
    start = time.perf_counter()
    model.fit(x, y, batch_size=32, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0, callbacks=callbacks)
    return (time.perf_counter() - start) / steps


def resnet50_kernels(rng: np.random.Generator) -> list[np.ndarray]:
    """The kernel shapes of ResNet-50 (channels last), bottleneck blocks [3, 4, 6, 3]."""
    shapes = [(7, 7, 3, 64)]
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(1, 1, cin, width), (3, 3, width, width), (1, 1, width, 4 * width)]
            if b == 0:
                shapes.append((1, 1, cin, 4 * width))
            cin = 4 * width
    shapes.append((2048, 1000))
    return [rng.normal(size=s).astype("float32") for s in shapes]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sparsity", type=float, default=0.8)
    args = parser.parse_args()

    # (a) callback overhead
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.steps * 32, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(args.steps * 32,))
    bare = cnn()
    bare.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model = cnn()
    model.set_weights(bare.get_weights())
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), steps_per_epoch=10_000)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fit_time(bare, x, y, 10, [])  # warm-up (tracing), and the step-0 mask update of the managed run
    fit_time(model, x, y, 10, callbacks)
    times_b, times_m, ratios = [], [], []
    for _ in range(args.rounds):
        times_b.append(fit_time(bare, x, y, args.steps, []))
        times_m.append(fit_time(model, x, y, args.steps, callbacks))
        ratios.append(times_m[-1] / times_b[-1])
    b, m = statistics.median(times_b), statistics.median(times_m)
    n_params = sum(int(np.prod(v.shape)) for v in model.weights)
    masked = sum(e.mask.size for e in manager.runtime.masks.params.values())
    print(f"(a) model: {n_params:,} parameters, {len(manager.runtime.masks.params)} masked kernels "
          f"({masked:,} weights); batch 32x32x32x3; keras {keras.__version__} ({keras.backend.backend()})")
    print(f"    plain fit     : {b * 1e3:.3f} ms/step")
    print(f"    with recipe   : {m * 1e3:.3f} ms/step (masks held, LR set every step, no mask update due)")
    print(f"    overhead      : {(statistics.median(ratios) - 1) * 100:+.2f}% median of {args.rounds} paired rounds "
          f"(min {(min(ratios) - 1) * 100:+.2f}%, max {(max(ratios) - 1) * 100:+.2f}%; target < 5%)")

    # (b) one mask update on ResNet-50-sized kernels
    kernels = resnet50_kernels(np.random.default_rng(1))
    total = sum(k.size for k in kernels)
    types = ["Conv2D" if k.ndim == 4 else "Dense" for k in kernels]

    def ours():
        return [compute_mask(k, args.sparsity, "unstructured", t) for k, t in zip(kernels, types, strict=True)]

    tensors = [keras.ops.convert_to_tensor(np.abs(k).reshape(-1)) for k in kernels]

    def top_k():
        return [keras.ops.top_k(t, max(1, round(t.shape[0] * (1 - args.sparsity))), sorted=False) for t in tensors]

    def np_sort():
        return [np.sort(np.abs(k), axis=None) for k in kernels]

    masks = ours()
    kept = sum(int(mk.sum()) for mk in masks)
    assert kept == sum(k.size - round(k.size * args.sparsity) for k in kernels), "compute_mask is not exact"
    t_ours, t_topk, t_sort = (best_of(f, args.repeats) for f in (ours, top_k, np_sort))
    print(f"(b) {len(kernels)} kernels, {total:,} weights (ResNet-50 shapes), sparsity {args.sparsity}, best of {args.repeats}")
    print(f"    compute_mask   : {t_ours * 1e3:9.1f} ms")
    print(f"    keras.ops.top_k: {t_topk * 1e3:9.1f} ms  (compute_mask / top_k = {t_ours / t_topk:.2f}x)")
    print(f"    np.sort |w|    : {t_sort * 1e3:9.1f} ms  (compute_mask / sort  = {t_ours / t_sort:.2f}x)")


if __name__ == "__main__":
    main()
