"""Keras backend costs, in one run.

(a) Per-step overhead of the recipe callback against plain ``model.fit`` on a small CNN (about
0.77M parameters, batch 32 of 32x32x3, SGD). The recipe holds GMP masks on every prunable
kernel with the next update far away (masks enforced by assignment around each step) and sets
the LR with a function modifier every step. Two identical models, one bare and one managed, run
``fit(epochs=1, steps_per_epoch=--steps)`` in rounds of four fits, bare/managed/managed/bare
then managed/bare/bare/managed, so that drift cancels within a round and neither model always
goes first; both get the same time-stamping callbacks, one before and one after the recipe's.
Three figures, each against the plain ``fit`` measured in the same run:

- step time (the figure; target under 5%): the interval between consecutive
  ``on_train_batch_begin`` of a fit is one whole step (callbacks and train function). Per round,
  the managed model's median interval over the bare model's; printed: the median of these
  ratios over rounds and their interquartile range, and the ratio of the two models' first
  quartiles over all steps (the steps that no other process on the machine slowed down).
- callback self time: the time inside the recipe's own ``on_train_batch_begin`` and
  ``on_train_batch_end`` (between the two stamps), median per step, as a share of the plain
  step: the cost measured within each step, so without the scheduling noise.
- fit wall time per step, per round, median ratio and interquartile range (the figure the first
  version of this benchmark printed). Each ``fit`` also pays a start-up and a teardown (the
  tf.data iterator) that varies from about 10 to 500 ms here, unrelated to the recipe: this
  figure swings by tens of percent from round to round and dilutes the overhead; shown for
  comparison only.

(b) One mask update on the kernels of a ResNet-50-sized list (the 53 conv + 1 dense kernel shapes
in Keras layout, about 25.5M float32 weights), against the bare cost of NumPy's selection
(target: within 1.5x each): layer-wise, ``recipe_spec_keras.masks.compute_mask`` (unstructured,
with its NaN/inf check) per kernel against ``np.partition(np.abs(k).ravel(), kth)`` per kernel;
global, ``global_unstructured_masks`` against one ``np.partition`` over all ``|w|``
concatenated, the concatenation excluded from the baseline (and shown apart). Then both again
on kernels already 70% zeros (a later GMP update, 0.7 -> ``--sparsity``), against
``np.partition`` on the same arrays: introselect is slow on such long runs of equal values,
the bracketed selection of :mod:`recipe_spec.masks.selection` is not. Ours and the baseline are timed
alternately, best of ``--repeats`` after one warm-up call each.
``--masks-only`` runs (b) alone.

    python benchmarks/bench_keras.py [--keras-backend tensorflow|jax|torch] [--steps 10 --rounds 24]
        [--update-every STEPS] [--masks-only]

On JAX the masks are enforced inside the compiled step; a step whose events write a variable
(an LR change, a mask update) syncs the trainer's state once (docs/keras.md); ``--update-every``
puts a mask update every that many steps into the measured fits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys  # noqa: E402
import time

if "--keras-backend" in sys.argv:  # Keras reads KERAS_BACKEND once, at import
    os.environ["KERAS_BACKEND"] = sys.argv[sys.argv.index("--keras-backend") + 1]
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from bench_keras_overhead import cnn as overhead_cnn  # noqa: E402
from recipe_spec_keras.masks import compute_mask, global_unstructured_masks  # noqa: E402

from recipe_spec import ScheduledModifierManager  # noqa: E402

RECIPE = """
modifiers:
  - !GMPruningModifier
    params: __ALL_PRUNABLE__
    init_sparsity: 0.5
    final_sparsity: 0.9
    start_epoch: 0
    end_epoch: 100
    update_frequency: 1
  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.05, final_lr: 0.001, start_epoch: 0, end_epoch: 100}
"""


def cnn() -> keras.Model:
    """The conv net of :mod:`bench_keras_overhead` at width 32 (about 0.77M parameters)."""
    return overhead_cnn(32)


class Stamps(keras.callbacks.Callback):
    """Appends ``perf_counter()`` at every batch begin and end (one list per fit)."""

    def __init__(self) -> None:
        super().__init__()
        self.begin: list[float] = []
        self.end: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begin.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self.end.append(time.perf_counter())


class Run:
    """One model's samples, per round: step intervals, callback self times, fit wall per step."""

    def __init__(self, model: keras.Model, recipe_callbacks: list) -> None:
        self.model, self.recipe_callbacks = model, recipe_callbacks
        self.rounds: list[dict[str, list[float]]] = []

    def fit(self, x, y, steps: int, round_: int | None) -> None:
        before, after = Stamps(), Stamps()
        start = time.perf_counter()
        self.model.fit(x, y, batch_size=32, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
                       callbacks=[before, *self.recipe_callbacks, after])
        wall = time.perf_counter() - start
        if round_ is None:
            return
        while len(self.rounds) <= round_:
            self.rounds.append({"step": [], "inside": [], "wall": []})
        samples = self.rounds[round_]
        samples["step"] += np.diff(before.begin).tolist()
        samples["inside"] += [(b1 - b0) + (e1 - e0) for b0, b1, e0, e1 in zip(before.begin, after.begin, before.end, after.end, strict=True)]
        samples["wall"].append(wall / steps)

    def pooled(self, key: str) -> list[float]:
        return [v for samples in self.rounds for v in samples[key]]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, med, q3


def spread(ratios: list[float]) -> str:
    q1, med, q3 = quartiles(ratios)
    return f"{(med - 1) * 100:+.2f}% (IQR {(q1 - 1) * 100:+.2f}% .. {(q3 - 1) * 100:+.2f}%)"


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


def best_pair(ours, base, repeats: int) -> tuple[float, float]:
    """Best times of ``ours`` and ``base``, timed alternately after one warm-up call each."""
    ours()
    base()
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for i, fn in enumerate((ours, base)):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0], best[1]


def mask_update(args: argparse.Namespace) -> None:
    """(b) one mask update on ResNet-50-sized kernels, layer-wise and global."""
    kernels = resnet50_kernels(np.random.default_rng(1))
    total = sum(k.size for k in kernels)
    types = ["Conv2D" if k.ndim == 4 else "Dense" for k in kernels]
    pairs = list(zip(kernels, types, strict=True))
    kth = [max(0, round(k.size * args.sparsity) - 1) for k in kernels]

    def layerwise():
        return [compute_mask(k, args.sparsity, "unstructured", t) for k, t in pairs]

    def partition_each():
        return [np.partition(np.abs(k).ravel(), i) for k, i in zip(kernels, kth, strict=True)]

    def global_():
        return global_unstructured_masks(pairs, args.sparsity)

    flat = np.concatenate([np.abs(k).ravel() for k in kernels])
    flat_kth = max(0, round(total * args.sparsity) - 1)

    def partition_all():
        return np.partition(flat, flat_kth)

    def concat():
        return np.concatenate([np.abs(k).ravel() for k in kernels])

    expected = (sum(round(k.size * args.sparsity) for k in kernels), round(total * args.sparsity))
    for masks, want in zip((layerwise(), global_()), expected, strict=True):
        assert all(mk.shape == k.shape for mk, k in zip(masks, kernels, strict=True))
        assert sum(int((~mk).sum()) for mk in masks) == want, "the masks are not exact"
    print(f"(b) {len(kernels)} kernels, {total:,} weights (ResNet-50 shapes, Keras layout), sparsity "
          f"{args.sparsity}, best of {args.repeats} (target ratio <= 1.5x)")
    t_ours, t_base = best_pair(layerwise, partition_each, args.repeats)
    print(f"    layer-wise: compute_mask per kernel {t_ours * 1e3:8.1f} ms  np.partition(|k|) per kernel "
          f"{t_base * 1e3:8.1f} ms  ratio {t_ours / t_base:5.2f}x")
    t_ours, t_base = best_pair(global_, partition_all, args.repeats)
    t_cat = best_of(concat, args.repeats)
    print(f"    global    : global_unstructured_masks   {t_ours * 1e3:8.1f} ms  np.partition(concat |w|)    "
          f"{t_base * 1e3:8.1f} ms  ratio {t_ours / t_base:5.2f}x")
    print(f"                (abs + concatenation alone {t_cat * 1e3:.1f} ms; baseline including it: "
          f"ratio {t_ours / (t_base + t_cat):.2f}x)")
    pruned = [k * compute_mask(k, 0.7, "unstructured", t) for k, t in pairs]  # a previous update
    pruned_pairs = list(zip(pruned, types, strict=True))
    pruned_flat = np.concatenate([np.abs(k).ravel() for k in pruned])
    t_ours, t_base = best_pair(
        lambda: [compute_mask(k, args.sparsity, "unstructured", t) for k, t in pruned_pairs],
        lambda: [np.partition(np.abs(k).ravel(), i) for k, i in zip(pruned, kth, strict=True)],
        args.repeats,
    )
    t_glob, t_glob_base = best_pair(
        lambda: global_unstructured_masks(pruned_pairs, args.sparsity),
        lambda: np.partition(pruned_flat, flat_kth),
        args.repeats,
    )
    print(f"    70% zeros -> {args.sparsity} (next GMP update): layer-wise ours {t_ours * 1e3:.1f} ms, "
          f"np.partition {t_base * 1e3:.1f} ms, ratio {t_ours / t_base:.2f}x; global ours "
          f"{t_glob * 1e3:.1f} ms, np.partition {t_glob_base * 1e3:.1f} ms, ratio {t_glob / t_glob_base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sparsity", type=float, default=0.8)
    parser.add_argument("--masks-only", action="store_true", help="run part (b) alone")
    parser.add_argument("--steps-only", action="store_true", help="run part (a) alone")
    parser.add_argument("--keras-backend", choices=("tensorflow", "jax", "torch"), default=None,
                        help="KERAS_BACKEND for this run (default: the environment's, else tensorflow)")
    parser.add_argument("--update-every", type=int, default=10_000,
                        help="steps between GMP mask updates (default: none due in the measured steps)")
    args = parser.parse_args()
    if args.masks_only:
        mask_update(args)
        return
    if args.steps < 2 or args.rounds < 2:
        parser.error("--steps and --rounds need at least 2 (step intervals, quartiles over rounds)")

    # (a) callback overhead
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = max(args.steps, 10) * 32  # the warm-up runs 10 steps
    x = rng.normal(size=(n, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(n,))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    bare_model = cnn()
    bare_model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss=loss)
    model = cnn()
    model.set_weights(bare_model.get_weights())
    manager = ScheduledModifierManager.from_yaml(RECIPE)
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
                                                steps_per_epoch=args.update_every)
    model.compile(optimizer=optimizer, loss=loss)
    bare, managed = Run(bare_model, []), Run(model, callbacks)
    # warm-up: tracing, and the step-0 mask update of the managed run
    bare.fit(x, y, 10, None)
    managed.fit(x, y, 10, None)
    for r in range(args.rounds):  # ABBA, then BAAB: drift within a round cancels
        for run in (bare, managed, managed, bare) if r % 2 == 0 else (managed, bare, bare, managed):
            run.fit(x, y, args.steps, r)
    med = statistics.median
    step_ratios = [med(m["step"]) / med(b["step"]) for m, b in zip(managed.rounds, bare.rounds, strict=True)]
    wall_ratios = [sum(m["wall"]) / sum(b["wall"]) for m, b in zip(managed.rounds, bare.rounds, strict=True)]
    b_steps, m_steps = bare.pooled("step"), managed.pooled("step")
    b_q, m_q = quartiles(b_steps), quartiles(m_steps)
    plain = b_q[1]
    inside = med(managed.pooled("inside")) - med(bare.pooled("inside"))  # minus the stamps' own cost
    n_params = sum(int(np.prod(v.shape)) for v in model.weights)
    masked = sum(e.mask.size for e in manager.runtime.masks.params.values())
    print(f"(a) model: {n_params:,} parameters, {len(manager.runtime.masks.params)} masked kernels "
          f"({masked:,} weights); batch 32x32x32x3; keras {keras.__version__} ({keras.backend.backend()})")
    print(f"    {args.rounds} rounds of 4 fits (bare, managed, managed, bare; next round managed first) "
          f"of {args.steps} steps: {len(b_steps)} + {len(m_steps)} step intervals")
    print(f"    plain fit           : {plain * 1e3:.3f} ms/step (median step; quartiles "
          f"{b_q[0] * 1e3:.1f} .. {b_q[2] * 1e3:.1f})")
    print(f"    with recipe         : {m_q[1] * 1e3:.3f} ms/step (quartiles {m_q[0] * 1e3:.1f} .. "
          f"{m_q[2] * 1e3:.1f}; masks held, LR set every step, "
          + ("no mask update due)" if args.update_every >= 10_000 else f"a mask update every {args.update_every} steps)"))
    print(f"    overhead, step time : {spread(step_ratios)}  <- median over rounds of managed/bare "
          f"median step; target < 5%")
    print(f"    overhead, fastest   : {(m_q[0] / b_q[0] - 1) * 100:+.2f}% (ratio of the first quartiles "
          f"of all steps: the steps no other process slowed)")
    print(f"    callback self time  : {inside * 1e3:.3f} ms/step = {inside / plain * 100:.2f}% of a plain "
          f"step (inside the recipe's batch begin/end)")
    print(f"    overhead, fit wall  : {spread(wall_ratios)} (whole fit() per step, with its start-up and "
          f"teardown: noisy, for comparison)")

    if not args.steps_only:
        mask_update(args)


if __name__ == "__main__":
    main()
