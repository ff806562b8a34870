"""The block-diagonal inverse empirical Fisher of M-FAC (``fisher_inverse``) at SparseML's
scale: m = 64 gradients of d = 1,000,000 coordinates in blocks of B = 2000 (float32, random
gradients), on the CPU by default.

- build, ``diag()`` and ``mul(v)``, each the best of ``--repeats`` runs;
- the baseline, measured in the same run and timed alternately with the build: a bare batched
  matmul with the FLOPs of the M-FAC recurrence, the Gram products ``(d/B, m, B) @ (d/B, B, m)``
  (2·m²·d = 8.19 GFLOP), both operands contiguous (also shown: the second one a transposed
  view, the layout the Gram product reads, ~20% faster here). Target: build within 3x of it. SparseML's ``FisherInverseFastBlock``
  takes ~53x (3.37 s against 0.064 s, /work/shared/reference/sparseml-mfac-semantics.md §9). The
  build does one product of that size (the Gram) and the small float64 work on the coefficients;
  ``diag()`` does the second (``V = C·G``, in pieces), ``mul`` two thin ones (see
  :mod:`recipe_spec.pruning.second_order.fisher`);
- memory per parameter: the bytes the inverse holds (its own tensors, not the gradients it
  reads) per coordinate, plus the gradient buffer (m values per coordinate), against ``fisher_bytes``' estimate, and the peak
  extra memory of one build (CPU: resident memory in a fresh process, Linux only; CUDA:
  ``max_memory_allocated``);
- a check of ``diag`` and ``mul`` against a dense float64 inverse of the first block;
- SparseML's own ``FisherInverseFastBlock`` on the same gradients when ``sparseml`` is
  importable (else the reference figures above, from another machine and run: reference only).

    python benchmarks/bench_second_order.py [--m 64] [--d 1000000] [--block 2000]
        [--repeats 5] [--device cpu|cuda] [--damp 1e-5] [--threads N] [--quick]

Times on a shared 2-core VM vary a lot from run to run: when the other cores are busy, every
parallel operation can stall, which hurts the build's dozen small float64 operations on the
(d/B, m, m) matrices (a Cholesky factorisation, a triangular solve) far more than one large
product; ``--threads 1`` shows the cost without that effect.

``--quick`` (m=16, d=20,000, B=500, 2 repeats, no SparseML, no subprocess) runs in about a
second and exits non-zero if the check fails: the tests run it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from recipe_spec_torch.second_order import fisher_inverse

from recipe_spec.pruning.second_order.fisher import block_layout, fisher_bytes

REFERENCE = ("SparseML FisherInverseFastBlock, m=64, d=1e6, B=2000, float32, 2-core Xeon VM, torch 2.13 "
             "(reference §9, another run): build 3.37 s, diag 0.25 s, mul 0.062 s; bare bmm 0.064 s: ~53x")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def best_alternating(fns: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Every time of each function, called in turn ``repeats`` times after one warm-up round,
    so that all of them see the same machine."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn, device))
    return times


def held_bytes(f: object, grads: torch.Tensor) -> int:
    """Bytes of the tensors a FisherInverse holds of its own (its blocks' data), not counting
    the views of ``grads`` it reads."""
    total = 0
    shared = grads.untyped_storage().data_ptr()
    for _, _, _, data in f._parts:  # type: ignore[attr-defined]
        for t in data if isinstance(data, tuple) else (data,):
            if t.untyped_storage().data_ptr() != shared:
                total += t.numel() * t.element_size()
    return total


def gradients(m: int, d: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(m, d, generator=gen).to(device)


def gram_operands(g: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The baseline's operands: the gradients as contiguous (d/B, m, B) blocks and their
    transposes (d/B, B, m), zero-padded to whole blocks."""
    m, d = g.shape
    b, nb = block_layout(d, block)
    padded = torch.nn.functional.pad(g, (0, nb * b - d))
    a = padded.reshape(m, nb, b).permute(1, 0, 2).contiguous()
    return a, a.transpose(1, 2).contiguous()


def check(f: object, g: torch.Tensor, damp: float, block: int, v: torch.Tensor) -> tuple[float, float]:
    """Largest relative errors of diag and mul on the first block against a dense float64
    inverse (relative to the largest entry of each)."""
    b = min(block, g.shape[1])
    g64 = g[:, :b].double().cpu()
    dense = torch.linalg.inv(damp * torch.eye(b, dtype=torch.float64) + g64.T @ g64 / g.shape[0])
    want_diag, want_mul = torch.diagonal(dense), dense @ v[:b].double().cpu()
    got_diag = f.diag()[:b].double().cpu()  # type: ignore[attr-defined]
    got_mul = f.mul(v)[:b].double().cpu()  # type: ignore[attr-defined]
    err = lambda got, want: float((got - want).abs().max() / want.abs().max())  # noqa: E731
    return err(got_diag, want_diag), err(got_mul, want_mul)


def _rss_field(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(name)


def _measure_peak(m: int, d: int, block: int, damp: float) -> None:
    """Child process: the peak resident memory one build adds above the gradients."""
    g = gradients(m, d, torch.device("cpu"))
    fisher_inverse(g[:, : min(d, 4 * block)], damp, block)  # warm-up: lazy initialisation, thread pools
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _rss_field("VmRSS")
    f = fisher_inverse(g, damp, block)
    print(_rss_field("VmHWM") - base, held_bytes(f, g))


def peak_extra_bytes(m: int, d: int, block: int, damp: float) -> tuple[int, int] | None:
    """(peak extra resident bytes of one build, bytes it keeps), in a fresh process with glibc
    told to map every allocation above 64 KiB on its own (so freed memory cannot hide one)."""
    if not Path("/proc/self/clear_refs").exists():
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    proc = subprocess.run(
        [sys.executable, __file__, "--peak", str(m), str(d), str(block), repr(damp)],
        env=env, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        return None
    peak, kept = proc.stdout.strip().splitlines()[-1].split()
    return int(peak), int(kept)


def sparseml_fast_block() -> type | None:
    try:
        from sparseml.pytorch.sparsification.pruning.modifier_pruning_mfac import (  # type: ignore[import-not-found]
            FisherInverseFastBlock,
        )
    except Exception:  # noqa: BLE001 - not installed, or an incompatible torch
        return None
    return FisherInverseFastBlock


def ms(t: float) -> str:
    return f"{t * 1e3:9.3f} ms" if t < 0.01 else f"{t * 1e3:9.1f} ms"


def stages(g: torch.Tensor, block: int, damp: float, repeats: int, device: torch.device) -> str:
    """Where a build's time goes: the Gram product, the Cholesky factorisation of ``M``, and
    ``R⁻¹`` by the batched triangular solve (what a GPU runs) and by doubling (the CPU's)."""
    from recipe_spec_torch.masks import TORCH_OPS

    f = fisher_inverse(g, damp, block)
    lo = f._blocks(g, f.num_blocks)  # type: ignore[attr-defined]
    gram = torch.matmul(lo, lo.transpose(1, 2)).double()
    a = gram / damp + torch.eye(g.shape[0], dtype=torch.float64, device=device) * g.shape[0]
    r = torch.linalg.cholesky_ex(a.transpose(1, 2))[0]
    eye = torch.eye(r.shape[-1], dtype=r.dtype, device=device).expand(r.shape)
    times = best_alternating({
        "Gram": lambda: torch.matmul(lo, lo.transpose(1, 2)),
        "Cholesky": lambda: torch.linalg.cholesky_ex(a.transpose(1, 2)),
        "R⁻¹ triangular solve": lambda: torch.linalg.solve_triangular(r, eye, upper=False),
        "R⁻¹ doubling": lambda: f._lower_inverse(r),  # type: ignore[attr-defined]
    }, repeats, device)
    used = "triangular solve" if TORCH_OPS.lower_inverse(r[:1]) is not None else "doubling"
    return (", ".join(f"{name} {min(ts) * 1e3:.3f} ms" for name, ts in times.items())
            + f" (this device uses the {used})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--block", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--damp", type=float, default=1e-5)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="a small size for the tests")
    args = parser.parse_args()
    if args.quick:
        args.m, args.d, args.block, args.repeats = 16, 20_000, 500, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    m, d, block, damp = args.m, args.d, args.block, args.damp
    b, nb = block_layout(d, block)
    flops = 2 * m * m * nb * b
    threads = torch.get_num_threads()
    print(f"fisher_inverse: m={m}, d={d:,}, B={b} ({nb} blocks), damp={damp:g}, float32, {device}; "
          f"torch {torch.__version__}, {threads} threads; Gram products {flops / 1e9:.2f} GFLOP; "
          f"best of {args.repeats}")

    g = gradients(m, d, device)
    v = torch.randn(d, generator=torch.Generator().manual_seed(1)).to(device)
    a, at = gram_operands(g, block)
    holder: dict[str, object] = {}

    def build() -> None:
        holder.pop("f", None)  # free the previous one first: one inverse alive at a time
        holder["f"] = fisher_inverse(g, damp, block)

    times = best_alternating({"build": build, "bmm": lambda: torch.bmm(a, at),
                              "bmm_t": lambda: torch.bmm(a, a.transpose(1, 2))}, args.repeats, device)
    f = holder["f"]
    times.update(best_alternating({"diag": f.diag, "mul": lambda: f.mul(v)}, args.repeats, device))  # type: ignore[attr-defined]
    best = {name: min(ts) for name, ts in times.items()}
    bmm_gflops = flops / best["bmm"] / 1e9
    print(f"  build   {ms(best['build'])}   (all: {', '.join(f'{t * 1e3:.3g}' for t in times['build'])} ms)")
    if not args.quick:
        print(f"    stages: {stages(g, block, damp, args.repeats, device)}")
    print(f"  diag()  {ms(best['diag'])}   = {best['diag'] / best['bmm']:.2f}x bmm (target <= 5x)")
    print(f"  mul(v)  {ms(best['mul'])}")
    print(f"  bare bmm {ms(best['bmm'])}  ({bmm_gflops:.0f} GFLOP/s; all: "
          f"{', '.join(f'{t * 1e3:.3g}' for t in times['bmm'])} ms); with the second operand a "
          f"transposed view (as the Gram product reads it) {ms(best['bmm_t']).strip()}")
    ratio = best["build"] / best["bmm"]
    total = best["build"] + best["diag"] + best["mul"]
    print(f"  build / bmm = {ratio:.2f}x (target <= 3x; SparseML FastBlock ~53x); against the faster "
          f"layout {best['build'] / min(best['bmm'], best['bmm_t']):.2f}x; build + diag + mul = "
          f"{total / best['bmm']:.2f}x bmm")

    kept = held_bytes(f, g)
    grads = m * d * g.element_size()
    estimate = fisher_bytes(m, d, block, g.element_size())
    print(f"  memory: inverse holds {kept / 2**20:.1f} MiB = {kept / d:.1f} B/parameter; with the gradient "
          f"buffer ({grads / d:.0f} B/parameter) {(kept + grads) / d:.1f} B/parameter; "
          f"fisher_bytes (kept + largest temporary) {estimate / d:.1f} B/parameter")
    if device.type == "cuda":
        del holder["f"], f
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        f = fisher_inverse(g, damp, block)
        peak = torch.cuda.max_memory_allocated(device) - base
        print(f"  peak extra CUDA memory of one build: {peak / 2**20:.1f} MiB = {peak / d:.1f} B/parameter")
    elif not args.quick:
        measured = peak_extra_bytes(m, d, block, damp)
        if measured is None:
            print("  peak extra resident memory: not measured (needs Linux /proc/self/clear_refs)")
        else:
            peak, _ = measured
            print(f"  peak extra resident memory of one build: {peak / 2**20:.1f} MiB = {peak / d:.1f} B/parameter "
                  f"(kept + temporaries)")

    err_diag, err_mul = check(f, g, damp, block, v)
    ok = err_diag < 1e-3 and err_mul < 1e-3
    print(f"  check, first block against a dense float64 inverse: diag {err_diag:.1e}, mul {err_mul:.1e} "
          f"(relative to the largest entry) {'ok' if ok else 'FAILED'}")

    if args.quick:
        return 0 if ok else 1
    fast_block = sparseml_fast_block()
    if fast_block is None:
        print(f"  sparseml: not installed. Reference only: {REFERENCE}")
        return 0 if ok else 1
    ref_times = best_alternating({
        "sparseml build": lambda: holder.__setitem__("s", fast_block(g, block, damp=damp, devices=[str(device)])),
        "bmm": lambda: torch.bmm(a, at),
    }, max(2, args.repeats // 2), device)
    s = holder["s"]
    ref_times.update(best_alternating({"sparseml diag": s.diag, "sparseml mul": lambda: s.mul(v)}, 2, device))  # type: ignore[attr-defined]
    rb = {name: min(ts) for name, ts in ref_times.items()}
    print(f"  sparseml FisherInverseFastBlock: build {ms(rb['sparseml build'])} ({rb['sparseml build'] / rb['bmm']:.1f}x bmm), "
          f"diag {ms(rb['sparseml diag'])}, mul {ms(rb['sparseml mul'])}; ours: build "
          f"{rb['sparseml build'] / best['build']:.1f}x faster")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--peak":
        _measure_peak(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit(main())
