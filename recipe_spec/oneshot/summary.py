"""The summary ``recipe-spec oneshot`` prints after a run (``summary(last_report(), output)``):
the smoothing each mapping got, one line per module compressed or quantized, the totals, how
the recipe was read, where the model went."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["summary"]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns; the last column is written as it is (no padding)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)).rstrip()
            + (f"  {row[-1]}" if row[-1] else "") for row in rows]


def _smoothing_lines(smoothing: Sequence[Any]) -> list[str]:
    """One line per mapping a smoothing modifier applied: AWQ's ratio and losses, SmoothQuant's
    range of scales."""
    if not smoothing:
        return []
    rows: list[tuple[str, ...]] = [("smooth layer", "modifier", "balance layers", "scales", "result")]
    for s in smoothing:
        low, high = float(s.scales.min()), float(s.scales.max())
        if s.ratio is not None:
            result = (f"ratio {s.ratio:.3g}{' duo' if s.duo else ''}, loss {s.initial_loss:.4g} -> "
                      f"{s.best_loss:.4g}")
        else:
            result = ""
        rows.append((s.smooth, s.modifier, ", ".join(b.rsplit(".", 1)[-1] for b in s.balance),
                     f"{low:.3g}..{high:.3g}", result))
    return [*_table(rows), f"{len(smoothing)} mapping(s) smoothed", ""]


def summary(report: Any, output: str | None) -> str:
    """The smoothing done (one line per mapping), one line per module compressed (sparsity, or
    "zeros" when a layer is quantized; loss, samples, quantization grid, any solver note), the totals, any note on how the recipe
    was read, and where the model was written."""
    lines = _smoothing_lines(getattr(report, "smoothing", []))
    # a quantized layer's zeros are weights its grid rounds to 0, not pruning: the column says
    # "zeros" when a layer is quantized, and a line under the table says what it counts
    quantizing = any(getattr(r, "grid", "") for r in report.layers)
    rows: list[tuple[str, ...]] = [("module", "modifier", "zeros" if quantizing else "sparsity", "loss",
                                     "samples", "quantized", "note")]
    for r in report.layers:
        rows.append((r.module, r.modifier, f"{r.sparsity:.4f}", "" if r.loss is None else f"{r.loss:.4g}",
                     str(r.samples or ""), getattr(r, "grid", ""), r.note))
    if not quantizing:
        rows = [(*row[:5], row[6]) for row in rows]
    lines += _table(rows)
    if quantizing:
        lines.append("zeros: the fraction of a layer's weights that are 0 after the run; for a quantized layer, "
                     "the weights its grid rounds to 0 (nothing is pruned unless a pruning modifier ran)")
    by_modifier: dict[str, list[Any]] = {}
    for r in report.layers:
        by_modifier.setdefault(r.modifier, []).append(r)
    for name, layers in by_modifier.items():
        quantized = [r for r in layers if getattr(r, "grid", "")]
        losses = [r.loss for r in quantized if r.loss is not None]
        if quantized:
            mean = f", mean GPTQ loss {sum(losses) / len(losses):.4g}" if losses else ""
            lines.append(f"{name}: {len(quantized)} layer(s) quantized{mean}")
        plain = [r.sparsity for r in layers if not getattr(r, "grid", "")]
        if plain:
            lines.append(f"{name}: {len(plain)} layer(s), mean sparsity {sum(plain) / len(plain):.4f}")
    lines += [f"note: {n}" for n in getattr(report, "notes", [])]
    notes = sum(1 for r in report.layers if r.note)
    if notes:
        lines.append(f"{notes} layer(s) needed more dampening than asked (see the note column)")
    if report.order is not None:
        lines.append(f"{len(report.order)} calibration sample(s) fed")
    lines.append(f"wrote {output}" if output else "nothing written (no --output)")
    return "\n".join(lines)
