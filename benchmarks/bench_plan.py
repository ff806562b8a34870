"""Cost per optimizer step of asking the compiled plan what to do.

Asks `plan.events_at(k)` for every k in order and compares with an empty Python loop of the
same length measured in the same run, for two recipes:

- corpus: the 73-modifier BERT recipe of the shared corpus (72 per-layer GMP modifiers
  updating every 0.01 epoch, and an epoch range), found by its path in the corpus INDEX, at
  `--corpus-steps-per-epoch` (1000) steps per epoch over its `max_epochs`, run `--passes`
  times. Target: at most 2 microseconds/step.
- synthetic: a 100-modifier recipe (96 per-layer GMP modifiers with staggered ranges, an LR
  function, a set-LR, weight decay and an epoch range) over `--steps` steps. Target: under 5
  microseconds/step.

    python benchmarks/bench_plan.py [--recipe corpus|synthetic|both] [--steps 1000000]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import recipe_spec
from recipe_spec.schedule import Plan, compile_plan

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
#: The corpus recipe measured: the source path its INDEX row gives.
CORPUS_RECIPE = "integrations/huggingface-transformers/recipes/99sparsity2epoch.yaml"
CORPUS_TARGET_US = 2.0
SYNTHETIC_TARGET_US = 5.0


def recipe_text(n_prune: int = 96) -> str:
    lines = [
        "modifiers:",
        "  - !EpochRangeModifier {start_epoch: 0, end_epoch: 100}",
        "  - !LearningRateFunctionModifier {lr_func: cosine, init_lr: 0.1, final_lr: 0.001, start_epoch: 60, end_epoch: 100}",
        "  - !SetLearningRateModifier {learning_rate: 0.05, start_epoch: 0}",
        "  - !SetWeightDecayModifier {weight_decay: 0.0, start_epoch: 50}",
    ]
    for i in range(n_prune):
        start = i % 10
        lines.append(
            f"  - !GMPruningModifier {{params: [layer{i}.weight], init_sparsity: 0.05, "
            f"final_sparsity: 0.9, start_epoch: {start}, end_epoch: {start + 30}, update_frequency: 0.5}}"
        )
    return "\n".join(lines) + "\n"


def corpus_recipe_path(source_path: str = CORPUS_RECIPE) -> Path:
    """The stored file of the corpus recipe whose INDEX row has ``source_path`` (at HEAD)."""
    with (SHARED / "corpus" / "INDEX.tsv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["source_path"] == source_path]
    rows.sort(key=lambda r: r["kind"] != "latest")
    if not rows:
        raise SystemExit(f"{source_path} is not in the corpus INDEX ({SHARED / 'corpus'})")
    return SHARED / rows[0]["stored_at"].split("/", 1)[1]


def measure(plan: Plan, steps: int, passes: int = 1) -> tuple[float, float, int]:
    """(µs per step of ``events_at``, µs per step of an empty loop, events seen), asking
    steps 0 .. steps-1 in order, ``passes`` times."""
    t0 = time.perf_counter()
    for _ in range(passes):
        for _ in range(steps):
            pass
    empty_s = time.perf_counter() - t0

    events = 0
    t0 = time.perf_counter()
    for _ in range(passes):
        for k in range(steps):
            events += len(plan.events_at(k))
    plan_s = time.perf_counter() - t0
    n = steps * passes
    return plan_s / n * 1e6, empty_s / n * 1e6, events // passes


def report(name: str, plan: Plan, steps: int, passes: int, target_us: float) -> None:
    t0 = time.perf_counter()
    compile_plan(plan.recipe, plan.steps_per_epoch)
    compile_s = time.perf_counter() - t0
    per_step, per_empty, events = measure(plan, steps, passes)
    met = "met" if per_step <= target_us else "NOT met"
    print(f"{name}: {len(plan.recipe.modifiers)} modifiers; steps_per_epoch {plan.steps_per_epoch:,}; "
          f"{steps:,} steps x {passes} passes; {events:,} events per pass")
    print(f"  compile_plan    : {compile_s * 1e3:.2f} ms (no per-step table is built)")
    print(f"  empty loop      : {per_empty:.3f} us/step")
    print(f"  plan.events_at  : {per_step:.3f} us/step; ratio {per_step / per_empty:.1f}x the empty loop")
    print(f"  target <= {target_us:g} us/step: {met}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", choices=("corpus", "synthetic", "both"), default="both")
    parser.add_argument("--steps", type=int, default=1_000_000, help="synthetic: steps asked")
    parser.add_argument("--steps-per-epoch", type=int, default=10_000, help="synthetic")
    parser.add_argument("--corpus-steps-per-epoch", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=100, help="corpus: passes over the run")
    args = parser.parse_args()
    if args.recipe in ("corpus", "both"):
        path = corpus_recipe_path()
        plan = compile_plan(recipe_spec.load(path), args.corpus_steps_per_epoch)
        report(f"corpus {path.name} ({plan.max_epochs} epochs)", plan, plan.total_steps, args.passes,
               CORPUS_TARGET_US)
    if args.recipe in ("synthetic", "both"):
        recipe = recipe_spec.loads(recipe_text())
        assert len(recipe.modifiers) == 100
        plan = compile_plan(recipe, args.steps_per_epoch)
        report("synthetic", plan, args.steps, 1, SYNTHETIC_TARGET_US)


if __name__ == "__main__":
    main()
