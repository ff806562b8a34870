"""The picture of a compiled schedule (``recipe-spec schedule --plot``).

matplotlib is imported only when :func:`plot` runs. Whatever the recipe, the layout stays
bounded: pruning modifiers that follow the same schedule share one line and one legend entry,
the legend holds at most :data:`MAX_LEGEND_ENTRIES` entries (the rest summed up as
``+N more``), the start/end labels along the top are merged per step and kept short, and the
figure grows with its legend only up to a fixed height.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..modifiers import spec
from .kinds import track_kind

if TYPE_CHECKING:
    from .events import Event
    from .plan import Plan
    from .report import SparsitySeries

__all__ = ["plot", "MAX_LEGEND_ENTRIES"]

#: The most entries the legend holds; further lines and bands are summed up in one entry.
MAX_LEGEND_ENTRIES = 12
#: Colours of the sparsity lines; schedules beyond them are drawn grey, without dots.
_COLOURS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
            "tab:olive", "tab:cyan")
_MORE = "0.55"
#: Characters of one label along the top (more parts become ``+N more``).
_LABEL_CHARS = 64
_LABEL_CHARS_TIGHT = 40
#: Characters of one legend entry.
_LEGEND_CHARS = 78
#: Characters of one title line.
_TITLE_CHARS = 110
_SET_WORDS = {
    ("lr", None): "set",
    ("weight_decay", None): "set",
    ("observers", "disabled"): "observers off",
    ("bn_stats", "frozen"): "BN stats frozen",
}


def _name(kind: str) -> str:
    """The short name a modifier's declaration gives it (``Look.label``)."""
    declared = spec(kind)
    if declared is not None:
        return declared.look.label
    return kind[: -len("Modifier")] if kind.endswith("Modifier") else kind


def _phase(kind: str) -> tuple[str, str] | None:
    """``(caption, colour)`` of a modifier drawn as a shaded span (``Look.phase``), or None."""
    declared = spec(kind)
    if declared is None or declared.look.phase is None:
        return None
    return declared.look.phase, declared.look.colour or "tab:gray"


def _lines_text(lines: Sequence[int]) -> str:
    """``line 4`` / ``lines 4, 9`` / ``lines 4-90`` (a range past three lines)."""
    lines = sorted(set(lines))
    if len(lines) == 1:
        return f"line {lines[0]}"
    shown = ", ".join(map(str, lines)) if len(lines) <= 3 else f"{lines[0]}\u2013{lines[-1]}"
    return f"lines {shown}"


def _capped(parts: Sequence[str], chars: int) -> str:
    """``parts`` joined by commas, as many as fit in about ``chars`` (at least one), the rest
    counted as ``+N more``."""
    kept: list[str] = []
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        if kept and len(", ".join([*kept, part])) + (len(f", +{rest} more") if rest else 0) > chars:
            return ", ".join(kept) + f", +{len(parts) - len(kept)} more"
        kept.append(part)
    return ", ".join(kept)


def _markers(plan: Plan, events: Sequence[Event]) -> list[tuple[int, str]]:
    """``(step, label)`` of every modifier's start and end (and one-off settings), merged
    per step, in step order. Modifiers that share a short name are told apart by line; three
    or more doing the same at one step are counted (``GMP \u00d772 start``)."""
    lines_of: dict[str, set[int]] = {}
    for t in plan.tracks:
        lines_of.setdefault(_name(t.modifier.type), set()).add(t.modifier.span.line)

    # step -> (short name, what) -> {modifier: line}, in event order
    by_step: dict[int, dict[tuple[str, str], dict[int, int]]] = {}
    for e in events:
        name = _name(e.type)
        if e.action == "start":
            if e.target == "trainable" and e.value is True:
                name, word = "Unfreeze", "start"
            else:
                word = "start"
        elif e.action == "end":
            word = "end"
            if e.target == "masks" and e.value == "release" and not track_kind(e.type).holds_only:
                word += " (masks released)"
        elif e.action == "set":
            word = _SET_WORDS.get((e.target, e.value), _SET_WORDS.get((e.target, None), f"{e.target} set"))
        else:
            continue
        doing = by_step.setdefault(e.step, {})
        if word.startswith("end") and any(w.startswith("end") and e.modifier in m for (_, w), m in doing.items()):
            continue
        doing.setdefault((name, word), {})[e.modifier] = e.line
    out = []
    for step in sorted(by_step):
        labels: list[str] = []
        for (name, word), who in by_step[step].items():
            if name == "Unfreeze":
                labels.append(f"{name} {word}")
            elif len(who) >= 3:
                labels.append(f"{name} \u00d7{len(who)} {word}")
            else:
                for line in who.values():
                    shown = f"{name} (line {line})" if len(lines_of.get(name, ())) > 1 else name
                    if f"{shown} {word}" not in labels:
                        labels.append(f"{shown} {word}")
        merged: list[str] = []
        for label in labels:  # "QAT observers off" + "QAT BN stats frozen": one label
            if merged and label.startswith("QAT ") and merged[-1].startswith("QAT ") and "start" not in label:
                merged[-1] += ", " + label[len("QAT ") :]
            else:
                merged.append(label)
        out.append((step, ", ".join(merged)))
    return out


def _phases(events: Sequence[Event]) -> dict[tuple[str, int, int | None], list[int]]:
    """``(type, start step, end step or None) -> lines`` of the modifiers drawn as phases."""
    spans: dict[tuple[str, int], tuple[int, int | None]] = {}
    for e in events:
        if _phase(e.type) is None:
            continue
        key = (e.type, e.line)
        if e.action == "start" and key not in spans:
            if e.target == "trainable" and e.value is True:
                continue
            spans[key] = (e.step, None)
        elif e.action == "end" and key in spans:
            spans[key] = (spans[key][0], e.step)
    out: dict[tuple[str, int, int | None], list[int]] = {}
    for (kind, line), (k0, k1) in spans.items():
        out.setdefault((kind, k0, k1), []).append(line)
    return out


def _wrap(label: str, width: int = 30) -> str:
    """Break a merged marker label after its commas into lines of about ``width`` characters."""
    lines: list[str] = []
    for part in label.split(", "):
        if lines and len(lines[-1]) + len(part) + 2 <= width:
            lines[-1] += f", {part}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(part)
    return "\n".join(lines)


def _lr_text(value: float) -> str:
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e3 or value == 0 else f"{value:.2g}"


def _label_markers(fig: Any, top: Any, markers: list[tuple[int, str]], S: int) -> None:
    """Write the marker labels above the top panel, as ticks of a secondary x axis.

    Markers closer than one text line are merged into one label, kept to about
    :data:`_LABEL_CHARS` characters. Labels lean at 35 degrees (broken into lines of about 30
    characters when there is room), or stand upright (shorter) when the markers are too close.
    """
    layout = fig.get_layout_engine()
    layout.execute(fig)  # the panels' final width, without drawing
    x0, x1 = top.get_xlim()
    px_per_epoch = top.get_window_extent().width / (x1 - x0)
    line_px = 9 / 72 * fig.dpi * 1.25
    groups: list[tuple[float, list[str]]] = []
    for k, text in markers:
        x = k / S
        if groups and (x - groups[-1][0]) * px_per_epoch < line_px:
            groups[-1][1].append(text)
        else:
            groups.append((x, [text]))
    xs = [x for x, _ in groups]
    parts = [", ".join(t).split(", ") for _, t in groups]
    texts = [_capped(p, _LABEL_CHARS) for p in parts]
    gaps = [(b - a) * px_per_epoch for a, b in zip(xs, xs[1:], strict=False)]
    lean = math.sin(math.radians(35))
    wrapped = [_wrap(t) for t in texts]
    if all(g * lean >= (w.count("\n") + 1) * line_px for g, w in zip(gaps, wrapped, strict=False)):
        labels, rotation = wrapped, 35
    else:
        labels = [_capped(p, _LABEL_CHARS_TIGHT) for p in parts]
        rotation = 35 if all(g * lean >= line_px for g in gaps) else 90
    sec = top.secondary_xaxis("top")
    sec.set_xticks(xs, labels)
    sec.tick_params(axis="x", length=0, labelsize=9, rotation=rotation)
    for label in sec.get_xticklabels():
        label.set_horizontalalignment("left")
        label.set_verticalalignment("bottom")
        label.set_rotation_mode("anchor")
    # a label near the right edge may run past the figure: make room for it (a third at most)
    layout.execute(fig)
    width = fig.bbox.width
    over = sec.get_tightbbox(fig.canvas.get_renderer()).x1 - width
    if over > 0:
        layout.set(rect=(0, 0, 1 - min(over + 8, width / 3) / width, 1))
        layout.execute(fig)
    fig.set_layout_engine("none")  # the layout is final: saving need not solve it again


def _draw_lr(ax: Any, lr_changes: list[tuple[int, Any]], events: Sequence[Event],
             initial_lr: float | None, x_end: float, S: int) -> Any:
    """The learning-rate panel; returns the handle of its line (None: nothing to draw)."""
    from matplotlib.ticker import FuncFormatter

    ax.grid(True, alpha=0.3)
    pts = [(step / S, value) for step, value in lr_changes if value is not None]
    if not pts:
        ax.set_ylabel("learning rate")
        ax.text(0.5, 0.5, "no learning rate set before the first change (pass --initial-lr)",
                transform=ax.transAxes, ha="center", va="center", color="0.4")
        return None
    xs = [x for x, _ in pts] + [x_end]
    ys = [y for _, y in pts] + [pts[-1][1]]
    setters = sorted({(e.type, e.line) for e in events if e.target == "lr"}, key=lambda t: t[1])
    label = "learning rate, param group 0"
    if setters:
        label += " (set by " + _capped([f"{t} line {ln}" for t, ln in setters], 90) + ")"
    if initial_lr is not None:
        label += f"; {_lr_text(initial_lr)} before" if setters else f": --initial-lr {_lr_text(initial_lr)}"
    steps_only = len(lr_changes) <= 12
    ax.plot(xs, ys, drawstyle="steps-post" if steps_only else "default", color="tab:blue", lw=2, label=label)
    formatter = FuncFormatter(lambda v, _: _lr_text(v))
    positive = [y for y in ys if y > 0]
    if positive and len(positive) == len(ys) and max(ys) / min(ys) >= 20 and steps_only:
        ax.set_yscale("log")
        ax.set_ylim(min(ys) / 2.5, max(ys) * 2.5)
        ax.yaxis.set_major_formatter(formatter)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_ylabel("learning rate (log scale)")
    else:
        ax.set_ylabel("learning rate")
        ax.set_ylim(0, max(ys) * 1.18 if max(ys) > 0 else 1)
        ax.yaxis.set_major_formatter(formatter)
    text = {"textcoords": "offset points", "fontsize": 9, "color": "tab:blue", "va": "bottom"}
    if steps_only:  # a few constant pieces: write each value on its piece
        pieces = [(xs[i], xs[i + 1], ys[i]) for i in range(len(xs) - 1)]
        for x0, x1, y in pieces:
            if x1 - x0 < 0.06 * x_end and len(pieces) > 1:
                continue
            ax.annotate(_lr_text(y), ((x0 + x1) / 2, y), xytext=(0, 4), ha="center", **text)
    else:  # a curve: write where it starts and ends
        ax.annotate(_lr_text(ys[0]), (xs[0], ys[0]), xytext=(4, 4), ha="left", **text)
        ax.annotate(_lr_text(ys[-1]), (xs[-1], ys[-1]), xytext=(-4, 6), ha="right", **text)
    return ax.get_lines()[0]


def _series_label(members: Sequence[SparsitySeries], ys: Sequence[float]) -> str:
    s = members[0]
    if len(members) == 1:
        label = f"{s.type}, line {s.line}" + (
            f", group {s.group + 1}" if s.label.endswith(f"group {s.group + 1}") else "")
    else:
        kinds = sorted({m.type for m in members})
        who = f"{len(members)} \u00d7 {kinds[0]}" if len(kinds) == 1 else f"{len(members)} pruning modifiers"
        label = f"{who}, {_lines_text([m.line for m in members])}"
    label += f": {ys[0]:.0%} \u2192 {ys[-1]:.0%}" if ys[0] != ys[-1] else f": {ys[0]:.0%}"
    label += f", {len(ys):,} updates" + (" each" if len(members) > 1 else "")
    if s.released_at is not None:
        label += ", masks released at the end"
    return label


def _draw_sparsity(ax: Any, sparsity: dict[str, SparsitySeries], x_end: float, S: int) -> tuple[list[Any], bool]:
    """One line per distinct sparsity schedule (modifiers with the same one share it); the
    first :data:`_COLOURS` in colour with their dots and final value, the rest grey. Returns
    the legend handles and whether dots were drawn."""
    from matplotlib.lines import Line2D

    same: dict[tuple[Any, ...], list[SparsitySeries]] = {}
    for s in sparsity.values():
        same.setdefault((tuple(s.updates), s.released_at), []).append(s)
    handles: list[Any] = []
    any_dots = False
    end_labels: list[float] = []
    rest: list[SparsitySeries] = []
    for i, members in enumerate(same.values()):
        s = members[0]
        xs = [k / S for k, _ in s.updates]
        ys = [v for _, v in s.updates]
        end_x = x_end if s.released_at is None else (s.released_at + 1) / S
        if i >= len(_COLOURS):
            rest.extend(members)
            ax.plot(xs + [end_x], ys + [ys[-1]], drawstyle="steps-post", color=_MORE, lw=1.2, zorder=2)
            continue
        color = _COLOURS[i]
        dots = len(xs) <= 400
        any_dots = any_dots or dots
        ax.plot(xs + [end_x], ys + [ys[-1]], drawstyle="steps-post", color=color, lw=2, zorder=2)
        if dots:
            ax.plot(xs, ys, "o", color=color, ms=3.5 if len(xs) > 60 else 4.5, zorder=3)
        handles.append(Line2D([], [], color=color, lw=2, marker="o" if dots else None, ms=4.5,
                              label=_series_label(members, ys)))
        # the final target, written at the right end of its line (clear of the others)
        y = ys[-1]
        below = any(abs(y - u) < 0.05 for u in end_labels)
        end_labels.append(y)
        ax.annotate(f"{y:.0%}", (end_x, y), xytext=(-3, -13 if below else 4), textcoords="offset points",
                    ha="right", va="bottom", fontsize=9, color=color, fontweight="bold")
    if rest:
        label = (f"+{len(same) - len(_COLOURS)} more schedules ({len(rest)} modifiers, "
                 f"{_lines_text([m.line for m in rest])})")
        handles.append(Line2D([], [], color=_MORE, lw=1.2, label=label))
    return handles, any_dots


def _draw_phases(ax: Any, events: Sequence[Event], x_end: float, S: int) -> list[Any]:
    """Shade the spans of the modifiers drawn as phases (one band per kind and range)."""
    from matplotlib.patches import Patch

    handles = []
    for (kind, k0, k1), lines in _phases(events).items():
        what, color = _phase(kind) or (kind, "tab:gray")
        ax.axvspan(k0 / S, x_end if k1 is None else k1 / S, color=color, alpha=0.16, lw=0, zorder=0)
        who = kind if len(lines) == 1 else f"{len(lines)} \u00d7 {kind}"
        handles.append(Patch(color=color, alpha=0.3, label=f"{what} ({who}, {_lines_text(lines)})"))
    return handles


def _legend_entries(handles: list[Any]) -> list[Any]:
    """At most :data:`MAX_LEGEND_ENTRIES` handles; the last one counts those left out."""
    from matplotlib.patches import Patch

    for h in handles:  # two columns of them fit across the figure
        if len(h.get_label()) > _LEGEND_CHARS:
            h.set_label(h.get_label()[: _LEGEND_CHARS - 1] + "\u2026")
    if len(handles) <= MAX_LEGEND_ENTRIES:
        return handles
    kept = handles[: MAX_LEGEND_ENTRIES - 1]
    return kept + [Patch(color="none", label=f"+{len(handles) - len(kept)} more (see the table)")]


def plot(
    plan: Plan,
    path: str | Path,
    epochs: float | None = None,
    initial_lr: float | None = None,
    *,
    dpi: int = 120,
) -> None:
    """Draw the schedule to ``path`` (``.png`` or ``.svg``, the first at ``dpi`` dots per inch).

    Two panels over epochs: the learning rate (only when the recipe sets it or
    ``initial_lr`` is given) above the target sparsity of the pruning modifiers (one line per
    distinct schedule, dots at its update steps). Dashed lines mark where modifiers start and
    end. Needs matplotlib (``pip install "matplotlib>=3.7"``; the ``plot`` extra).
    """
    from .report import PLOT_SUFFIXES, horizon, lr_changes, sparsity_tracks

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        raise ValueError(f"cannot draw {path.name!r}: the picture must end in .png or .svg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    S = plan.steps_per_epoch
    n = horizon(plan, epochs)
    x_end = (n if epochs is not None else max(n - 1, plan.total_steps, 1)) / S
    events = list(plan.iter_events(0, n))
    has_lr = initial_lr is not None or any(e.target == "lr" for e in events)
    sparsity = sparsity_tracks(events)

    fig = Figure(figsize=(11, 7.2 if has_lr else 5.0), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax_lr, ax_sp = fig.subplots(2, 1, sharex=True, height_ratios=[1, 1.35]) if has_lr else (None, fig.subplots())
    name = Path(plan.recipe.path).name if plan.recipe.path else "recipe"
    if len(name) > _TITLE_CHARS:  # keep both ends of a very long file name
        name = name[: _TITLE_CHARS // 2 - 1] + "\u2026" + name[-(_TITLE_CHARS // 2) :]
    title = f"schedule at {S:,} steps per epoch ({x_end:g} epochs = {round(x_end * S):,} optimizer steps)"
    sep = ":\n" if len(name) + len(title) > _TITLE_CHARS else ": "
    fig.suptitle(name + sep + title, fontsize=13)
    lr_handle = _draw_lr(ax_lr, lr_changes(events, initial_lr), events, initial_lr, x_end, S) if ax_lr is not None else None

    handles, any_dots = _draw_sparsity(ax_sp, sparsity, x_end, S)
    handles += _draw_phases(ax_sp, events, x_end, S)
    ax_sp.set_ylim(0, 1.08)
    ax_sp.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax_sp.set_ylabel("target sparsity (% of weights zero)")
    ax_sp.grid(True, alpha=0.3)
    # one legend, below the picture, where it hides nothing; the figure grows with its rows
    handles = _legend_entries(([lr_handle] if lr_handle is not None else []) + handles)
    if handles:
        ncol = 2 if len(handles) > 2 else len(handles)
        rows = math.ceil(len(handles) / ncol)
        fig.set_figheight(fig.get_figheight() + 0.2 * max(rows - 3, 0))
        fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=9, frameon=False,
                   title="dots: steps where a target sparsity is updated" if any_dots else None,
                   title_fontsize=9)
    if not sparsity:
        ax_sp.text(0.5, 0.5, "no gradual pruning modifier in this recipe", transform=ax_sp.transAxes,
                   ha="center", va="center", color="0.4")
    ax_sp.set_xlabel(f"epoch ({S:,} optimizer steps each)")
    ax_sp.set_xlim(-0.012 * x_end, x_end * 1.012)
    ax_sp.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    # start / end markers, labelled along the top of the upper panel
    markers = _markers(plan, events)
    axes = [ax for ax in (ax_lr, ax_sp) if ax is not None]
    for ax in axes:
        for k, _ in markers:
            ax.axvline(k / S, color="0.35", ls="--", lw=1, zorder=1)
    if markers:
        _label_markers(fig, axes[0], markers, S)
    # no date or software version in the file, so the same plan draws the same bytes
    metadata: dict[str, Any] = {"Software": None} if suffix == ".png" else {"Date": None}
    from matplotlib import rc_context

    from ..atomic import replacing

    # fixed SVG ids (matplotlib draws random ones), so the same plan draws the same bytes
    with rc_context({"svg.hashsalt": "recipe-spec"}), replacing(path) as tmp:
        fig.savefig(tmp, dpi=dpi, metadata=metadata, format=suffix.lstrip("."))  # whole or not at all
