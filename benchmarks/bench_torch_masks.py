"""Magnitude masks on a ResNet-50-sized model (53 conv weights + the fc weight, ~25.5M
parameters), CPU, default thread count.

(a) one layer-wise unstructured mask update: ``unstructured_mask`` per tensor, against the
    bare cost of finding each tensor's k-th smallest ``|w|`` with ``torch.kthvalue``
    (target: within 1.5x). Also end to end (``compute_mask`` from the weights, with its
    NaN/inf check, against ``kthvalue`` of ``|w|``), and on weights that are already 70%
    zeros (a later GMP update, and a target below the existing zeros: all ties).
(b) one global mask update: ``global_unstructured_masks`` against one ``torch.kthvalue`` over
    all scores concatenated (target: within 1.5x), the concatenation itself excluded from
    the baseline (and shown apart).
(c) memory: the bool masks against the fp32 weights (1/4), and the peak extra resident memory
    of one update (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``), ours against the
    ``kthvalue`` baseline.

(d) for reference, (a) and (b) again with ``torch.set_num_threads(1)``.

Times are the best of 3 after one warm-up call (``time.perf_counter``); ours and the baseline
are timed alternately, so that both see the same machine. Note: ``torch.kthvalue`` on a flat
tensor runs on one thread, while the comparisons and counts used here run on all of them; on a
machine whose other cores are busy (a shared VM) each parallel op can stall for milliseconds,
which hurts the many short ops of a mask update and not the baseline. (d) shows the cost
without that effect.

    python benchmarks/bench_torch_masks.py [--update-docs] [--device cuda]

``--device cuda`` runs (a) and (b) on the GPU against ``torch.kthvalue`` on the same device
(timed after ``torch.cuda.synchronize``), with the peak extra GPU memory of one update.

``--update-docs`` writes the figures into docs/pytorch.md (``benchmarks/docfigures.py``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from recipe_spec_torch.masks import compute_mask, global_unstructured_masks, unstructured_mask

SPARSITY = 0.8
DEVICE = torch.device(sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def resnet50_weight_shapes() -> list[tuple[int, ...]]:
    """The conv and fc weight shapes of torchvision's ResNet-50 (25.50M entries)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7)]
    inp = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(width, inp, 1, 1), (width, width, 3, 3), (width * 4, width, 1, 1)]
            if b == 0:
                shapes.append((width * 4, inp, 1, 1))  # downsample
            inp = width * 4
    shapes.append((1000, 2048))
    return shapes


def weights() -> list[torch.Tensor]:
    """Kaiming-normal weights: the magnitude scale differs per layer (fan-in)."""
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(s, generator=gen) * math.sqrt(2.0 / math.prod(s[1:]))).to(DEVICE) for s in resnet50_weight_shapes()
    ]


def best_of(ours: Callable[[], object], base: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """Best times of ``ours`` and ``base``, timed alternately after one warm-up call each."""
    ours()
    base()
    _sync()
    best = [math.inf, math.inf]
    for _ in range(repeat):
        for i, fn in enumerate((ours, base)):
            t0 = time.perf_counter()
            fn()
            _sync()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best[0], best[1]


_MEMORY_CASES = {
    "global": lambda scores, k: global_unstructured_masks(scores, SPARSITY),
    "global-baseline": lambda scores, k: torch.kthvalue(torch.cat([s.reshape(-1) for s in scores]), k),
    "layerwise": lambda scores, k: [unstructured_mask(s, SPARSITY) for s in scores],
    "layerwise-baseline": lambda scores, k: kth_per_tensor(scores, SPARSITY),
}


def _rss_field(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(name)


def _measure_peak(case: str) -> None:
    """Child process: print the peak resident memory one update adds above the scores."""
    scores = [w.abs() for w in weights()]
    k = round(SPARSITY * sum(s.numel() for s in scores))
    _MEMORY_CASES[case](scores, k)  # warm-up: lazy initialisation, thread pools
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _rss_field("VmRSS")
    result = _MEMORY_CASES[case](scores, k)
    print(_rss_field("VmHWM") - base)
    del result


def peak_extra_bytes(case: str) -> int | None:
    """Peak extra resident memory of one update, measured in a fresh process (Linux only).
    glibc is told to map every allocation above 64 KiB on its own and to unmap it when freed,
    so that memory freed earlier cannot hide an allocation."""
    if not Path("/proc/self/clear_refs").exists():
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    proc = subprocess.run(
        [sys.executable, __file__, "--peak", case], env=env, capture_output=True, text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return int(proc.stdout.strip().splitlines()[-1])


def kth_per_tensor(scores: list[torch.Tensor], sparsity: float) -> list[torch.Tensor]:
    return [torch.kthvalue(s.reshape(-1), max(1, round(sparsity * s.numel()))).values for s in scores]


#: (section, label, ours, baseline) of every timed line, for --update-docs
FIGURES: list[tuple[str, str, float, float]] = []
SECTION = [""]


def line(label: str, ours: float, base: float) -> None:
    FIGURES.append((SECTION[0], label.strip(), ours, base))
    print(f"  {label:<58} ours {ours * 1e3:8.1f} ms  kthvalue {base * 1e3:8.1f} ms  ratio {ours / base:5.2f}x")


def time_updates(ws: list[torch.Tensor], scores: list[torch.Tensor], full: bool) -> None:
    """(a) and (b): print one line per case."""
    SECTION[0] = f"{torch.get_num_threads()} thread(s)"
    print("(a) layer-wise unstructured, one update over all tensors (target ratio <= 1.5x)")
    line("unstructured_mask(|w|) vs kthvalue(|w|) per tensor", *best_of(
        lambda: [unstructured_mask(s, SPARSITY) for s in scores],
        lambda: kth_per_tensor(scores, SPARSITY),
    ))
    if full:
        line("compute_mask(w) (abs + NaN/inf check) vs kthvalue(w.abs())", *best_of(
            lambda: [compute_mask(w, SPARSITY) for w in ws],
            lambda: kth_per_tensor([w.abs() for w in ws], SPARSITY),
        ))
        pruned = [s * unstructured_mask(s, 0.7) for s in scores]  # a previous update at 70%
        line("70% zeros -> 80% (next GMP update)", *best_of(
            lambda: [unstructured_mask(s, SPARSITY) for s in pruned],
            lambda: kth_per_tensor(pruned, SPARSITY),
        ))
        line("70% zeros -> 60% (threshold inside the zeros: all ties)", *best_of(
            lambda: [unstructured_mask(s, 0.6) for s in pruned],
            lambda: kth_per_tensor(pruned, 0.6),
        ))
    print("(b) global unstructured, one update (target ratio <= 1.5x)")
    flat = torch.cat([s.reshape(-1) for s in scores])
    k = round(SPARSITY * flat.numel())
    ours, base = best_of(
        lambda: global_unstructured_masks(scores, SPARSITY), lambda: torch.kthvalue(flat, k)
    )
    line("global_unstructured_masks vs kthvalue(concatenated)", ours, base)
    if full:
        _, cat = best_of(lambda: None, lambda: torch.cat([s.reshape(-1) for s in scores]))
        line("  same, baseline including the concatenation", ours, base + cat)


def cuda_main() -> None:
    """(a) and (b) on the GPU, and the peak extra GPU memory of one update."""
    ws = weights()
    scores = [w.abs() for w in ws]
    n = sum(w.numel() for w in ws)
    print(f"ResNet-50 weights on {torch.cuda.get_device_name(DEVICE)}: {len(ws)} tensors, {n:,} parameters; "
          f"sparsity {SPARSITY}; torch {torch.__version__}")
    time_updates(ws, scores, full=True)
    k = round(SPARSITY * n)
    for case, fn in _MEMORY_CASES.items():
        _sync()
        torch.cuda.reset_peak_memory_stats(DEVICE)
        base = torch.cuda.memory_allocated(DEVICE)
        result = fn(scores, k)
        _sync()
        print(f"  peak extra GPU memory, {case}: {(torch.cuda.max_memory_allocated(DEVICE) - base) / 2**20:.1f} MiB")
        del result


def main() -> None:
    if DEVICE.type == "cuda":
        cuda_main()
        return
    ws = weights()
    scores = [w.abs() for w in ws]
    n = sum(w.numel() for w in ws)
    print(f"ResNet-50 weights: {len(ws)} tensors, {n:,} parameters; sparsity {SPARSITY}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    time_updates(ws, scores, full=True)
    masks = global_unstructured_masks(scores, SPARSITY)
    zeros = sum(int((~m).sum()) for m in masks)
    per = [1 - m.float().mean().item() for m in masks]
    print(f"  pruned {zeros:,} of {n:,} (round(s*n) = {round(SPARSITY * n):,}); per-tensor "
          f"sparsity {min(per):.3f} .. {max(per):.3f}")

    print("(c) memory")
    mask_bytes = sum(m.numel() * m.element_size() for m in masks)
    weight_bytes = sum(w.numel() * w.element_size() for w in ws)
    print(f"  bool masks {mask_bytes / 2**20:.1f} MiB vs fp32 weights {weight_bytes / 2**20:.1f} MiB "
          f"= {mask_bytes / weight_bytes:.3f}")
    memory = [f"- Memory: a computed bool mask is {mask_bytes / weight_bytes:.2f}x the fp32 weights; a held "
              "mask adds its bits for the fast selection (1x the weights' bytes)."]
    del masks
    peaks = {case: peak_extra_bytes(case) for case in _MEMORY_CASES}
    mib = {case: v / 2**20 for case, v in peaks.items() if v is not None}
    if len(mib) == len(peaks):
        print(f"  peak extra RSS, global update: ours {mib['global']:.1f} MiB (its masks included); "
              f"cat + kthvalue {mib['global-baseline']:.1f} MiB")
        print(f"  peak extra RSS, layer-wise update: ours {mib['layerwise']:.1f} MiB (its masks "
              f"included); kthvalue per tensor {mib['layerwise-baseline']:.1f} MiB")
        memory.append(f"- Peak extra memory of one update: global {mib['global']:.0f} MiB (cat + `kthvalue`: "
                      f"{mib['global-baseline']:.0f} MiB), layer-wise {mib['layerwise']:.0f} MiB "
                      f"(`kthvalue` per tensor: {mib['layerwise-baseline']:.0f} MiB).")
    else:
        print("  peak extra RSS: not measured (needs Linux /proc/self/clear_refs)")

    threads = torch.get_num_threads()
    if threads > 1:
        print("(d) reference: (a) and (b) with torch.set_num_threads(1)")
        torch.set_num_threads(1)
        try:
            time_updates(ws, scores, full=False)
        finally:
            torch.set_num_threads(threads)
    if "--update-docs" in sys.argv:
        from docfigures import replace_block

        rows = ["| threads | update | ours | `torch.kthvalue` | ratio |", "|---|---|---|---|---|"]
        rows += [f"| {sec} | {label.replace('|', chr(92) + '|')} | {o * 1e3:.0f} ms | {b * 1e3:.0f} ms | **{o / b:.2f}x** |"
                 for sec, label, o, b in FIGURES]
        intro = (f"One magnitude mask update over ResNet-50's {len(ws)} weights ({n:,} parameters, sparsity "
                 f"{SPARSITY}), best of 3, against `torch.kthvalue` on the same tensors (target: within 1.5x):")
        replace_block("pytorch.md", "bench_torch_masks", [intro, "", *rows, "", *memory])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--peak":
        _measure_peak(sys.argv[2])
    else:
        main()
