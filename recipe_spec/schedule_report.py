"""What a compiled schedule does, as rows, series, text and a picture (``recipe-spec schedule``).

Pure functions of a :class:`~recipe_spec.schedule.plan.Plan`; no framework is imported, and
matplotlib only by :func:`plot`.

>>> import recipe_spec
>>> from recipe_spec.schedule import compile_plan
>>> recipe = recipe_spec.loads('''
... modifiers:
...   - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.05, final_sparsity: 0.8,
...                       start_epoch: 0, end_epoch: 2, update_frequency: 1}
... ''')
>>> plan = compile_plan(recipe, steps_per_epoch=4)
>>> [(r["step"], r["action"], r["value"]) for r in schedule_rows(plan)]
[(0, 'start', 0.05), (4, 'update', 0.70625), (8, 'end', 0.8)]
>>> sparsity_series(plan)["GMPruningModifier line 3"].values[3:6]
[0.05, 0.70625, 0.70625]
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .modifiers import schedule_of, spec

if TYPE_CHECKING:
    from .schedule.plan import Event, Plan

__all__ = [
    "COLUMNS",
    "PLOT_SUFFIXES",
    "SparsitySeries",
    "horizon",
    "schedule_rows",
    "lr_series",
    "sparsity_series",
    "render_table",
    "render_csv",
    "render_json",
    "plot",
]

JSON_FORMAT_VERSION = 1
#: The fields of a row, in column order.
COLUMNS = ("step", "epoch", "modifier", "line", "action", "target", "value", "params")
#: The picture formats :func:`plot` writes, by file suffix.
PLOT_SUFFIXES = (".png", ".svg")


# -- the time range ------------------------------------------------------------------------
def _steps_before(epochs: float, steps_per_epoch: int) -> int:
    """How many steps ``k`` have ``k < epochs * steps_per_epoch`` (epochs as written)."""
    exact = Fraction(epochs) if isinstance(epochs, int) else Fraction(repr(float(epochs)))
    return max(math.ceil(exact * steps_per_epoch), 0)


def horizon(plan: Plan, epochs: float | None = None) -> int:
    """The number of steps the series and the picture cover.

    ``epochs`` given: the steps before ``epochs * steps_per_epoch``. Otherwise the whole run:
    ``max_epochs`` (the recipe's longest epoch) and at least up to the last event (a modifier
    ending at the last epoch has its end event on the first step after the run).
    """
    if epochs is not None:
        return _steps_before(epochs, plan.steps_per_epoch)
    last = plan.last_event_step
    return max(plan.total_steps, (last + 1) if last is not None else 0, 1)


# -- rows ----------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return str(value)


def _row(e: Event) -> dict[str, Any]:
    return {
        "step": e.step,
        "epoch": e.epoch,
        "modifier": e.type,
        "line": e.line,
        "action": e.action,
        "target": e.target,
        "value": _jsonable(e.value),
        "params": _jsonable(e.params),
    }


def schedule_rows(plan: Plan, epochs: float | None = None) -> list[dict[str, Any]]:
    """One JSON-safe row per event (fields :data:`COLUMNS`), in the order they happen.

    ``epochs`` given: only the steps before ``epochs * steps_per_epoch``; otherwise up to the
    last event (or ``plan.total_steps`` when a modifier never ends).
    ``modifier`` is the modifier's type and ``line`` the line of its ``!Tag`` in the file.
    """
    stop = None if epochs is None else _steps_before(epochs, plan.steps_per_epoch)
    return [_row(e) for e in plan.iter_events(0, stop)]


# -- series --------------------------------------------------------------------------------
def _applies_to_group0(params: Any) -> bool:
    if params is None:
        return True
    if isinstance(params, (list, tuple, set, frozenset)):
        return any(p == 0 and not isinstance(p, bool) for p in params)
    return params == 0


def _lr_changes(
    events: Iterable[Event], initial_lr: float | None
) -> list[tuple[int, float | None]]:
    """The learning rate of parameter group 0 as ``(step, value from this step on)``."""
    changes: list[tuple[int, float | None]] = [(0, initial_lr)]
    for e in events:
        if e.target != "lr" or not _applies_to_group0(e.params):
            continue
        if not isinstance(e.value, (int, float)) or isinstance(e.value, bool):
            continue
        value = float(e.value)
        if changes[-1][0] == e.step:  # the last writer of a step wins
            changes[-1] = (e.step, value)
        elif changes[-1][1] != value:
            changes.append((e.step, value))
    return changes


def _expand(changes: Sequence[tuple[int, Any]], n: int) -> list[Any]:
    out: list[Any] = []
    for i, (step, value) in enumerate(changes):
        if step >= n:
            break
        upto = changes[i + 1][0] if i + 1 < len(changes) else n
        out.extend([value] * (min(upto, n) - step))
    return out


def touches_lr(plan: Plan, epochs: float | None = None) -> bool:
    """Whether any modifier of the plan sets the learning rate (within ``epochs``)."""
    return any(e.target == "lr" for e in plan.iter_events(0, horizon(plan, epochs)))


def lr_series(
    plan: Plan, epochs: float | None = None, initial_lr: float | None = None
) -> list[float | None]:
    """The learning rate in force at each step (index = step) of :func:`horizon`.

    ``initial_lr`` (None: unknown) until the first learning-rate event; an event changes it
    when it applies to every param group or lists group 0 (with several groups, group 0 is
    the one followed). Within a step the last writer wins, as in SparseML's manager.
    """
    n = horizon(plan, epochs)
    return _expand(_lr_changes(plan.iter_events(0, n), initial_lr), n)


@dataclass
class SparsitySeries:
    """The target sparsity one pruning modifier (or one of its sparsity groups) sets.

    ``values[k]``: the target in force at step ``k`` (None before the start, and after the
    end when ``leave_enabled: false`` releases the masks); ``updates``: ``(step, value)`` at
    each of its events (start, updates, end).
    """

    label: str
    type: str
    line: int
    modifier: int
    group: int = 0
    values: list[float | None] = field(default_factory=list)
    updates: list[tuple[int, float]] = field(default_factory=list)
    released_at: int | None = None


def _sparsity_tracks(events: Sequence[Event]) -> dict[str, SparsitySeries]:
    by_key: dict[tuple[int, int], SparsitySeries] = {}
    groups: dict[int, int] = {}
    releases: dict[int, int] = {}
    for e in events:
        if e.target == "masks" and e.value == "release" and e.action == "end":
            releases[e.modifier] = e.step
    step_seen: dict[int, tuple[int, int]] = {}
    for e in events:
        if e.target != "sparsity" or not isinstance(e.value, (int, float)):
            continue
        last_step, count = step_seen.get(e.modifier, (-1, 0))
        j = count if last_step == e.step else 0
        step_seen[e.modifier] = (e.step, j + 1)
        groups[e.modifier] = max(groups.get(e.modifier, 0), j + 1)
        key = (e.modifier, j)
        s = by_key.get(key)
        if s is None:
            s = by_key[key] = SparsitySeries("", e.type, e.line, e.modifier, j)
        s.updates.append((e.step, float(e.value)))
    out: dict[str, SparsitySeries] = {}
    for (mod, j), s in sorted(by_key.items()):
        s.label = f"{s.type} line {s.line}" + (f", group {j + 1}" if groups[mod] > 1 else "")
        s.released_at = releases.get(mod)
        out[s.label] = s
    return out


def sparsity_series(plan: Plan, epochs: float | None = None) -> dict[str, SparsitySeries]:
    """Per pruning modifier (key ``"TYPE line N"``, with ``", group G"`` added when its
    ``final_sparsity`` maps several targets), the target sparsity in force at each step of
    :func:`horizon`, and its update points."""
    n = horizon(plan, epochs)
    out = _sparsity_tracks(list(plan.iter_events(0, n)))
    for s in out.values():
        changes: list[tuple[int, float | None]] = [(0, None)] + list(s.updates)
        if s.released_at is not None:
            changes.append((s.released_at + 1, None))
        s.values = _expand(changes, n)
    return out


# -- text formats --------------------------------------------------------------------------
_NO_PARAMS = {"lr": "all groups", "weight_decay": "all groups"}
_PARAMS_WIDTH = 60


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _params_cell(row: Mapping[str, Any]) -> str:
    params = row["params"]
    if params is None:
        return _NO_PARAMS.get(
            row["target"],
            "all" if row["target"] in ("sparsity", "masks", "trainable", "quantization") else "-",
        )
    if isinstance(params, list):
        text = ", ".join(_cell(p) for p in params)
    else:
        text = _cell(params)
    return text if len(text) <= _PARAMS_WIDTH else text[: _PARAMS_WIDTH - 3] + "..."


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned columns for people: numbers right-aligned, values to 6 significant digits,
    long parameter lists shortened (the JSON and CSV formats keep everything)."""
    if not rows:
        return "(no events)\n"
    header = list(COLUMNS)
    body = [
        [
            str(r["step"]),
            f"{r['epoch']:.6g}",
            str(r["modifier"]),
            str(r["line"]),
            str(r["action"]),
            str(r["target"]),
            _cell(r["value"]),
            _params_cell(r),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    right = {0, 1, 3}

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]
    return "\n".join(out) + "\n"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)  # what json.dumps writes, faster
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def render_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """CSV with a header row (:data:`COLUMNS`). Numbers at full precision; lists and mappings
    as compact JSON; an empty cell is None."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_csv_cell(r[c]) for c in COLUMNS])
    return buf.getvalue()


def render_json(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """One document: ``{"version": 1, "recipe", "steps_per_epoch", "epochs", "max_epochs",
    "min_epochs", "events": rows}``; ``meta`` gives the middle keys."""
    doc: dict[str, Any] = {"version": JSON_FORMAT_VERSION}
    for key in ("recipe", "steps_per_epoch", "epochs", "max_epochs", "min_epochs"):
        doc[key] = _jsonable(meta.get(key))
    doc["events"] = list(rows)
    return json.dumps(doc, indent=2) + "\n"


# -- the picture ---------------------------------------------------------------------------
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


def _markers(plan: Plan, events: Sequence[Event]) -> list[tuple[int, str]]:
    """``(step, label)`` of every modifier's start and end (and one-off settings), merged
    per step, in step order. Modifiers that share a short name are told apart by line."""
    lines_of: dict[str, set[int]] = {}
    for t in plan.tracks:
        lines_of.setdefault(_name(t.modifier.type), set()).add(t.modifier.span.line)

    def short(kind: str, line: int) -> str:
        name = _name(kind)
        return f"{name} (line {line})" if len(lines_of.get(name, ())) > 1 else name

    by_step: dict[int, list[str]] = {}
    ended: set[tuple[int, int]] = set()
    for e in events:
        if e.action == "start":
            if e.target == "trainable" and e.value is True:
                label = "Unfreeze start"
            else:
                label = f"{short(e.type, e.line)} start"
        elif e.action == "end":
            if (e.step, e.modifier) in ended:
                continue
            ended.add((e.step, e.modifier))
            label = f"{short(e.type, e.line)} end"
            if e.target == "masks" and e.value == "release" and schedule_of(e.type) != "hold_masks":
                label += " (masks released)"
        elif e.action == "set":
            word = _SET_WORDS.get(
                (e.target, e.value), _SET_WORDS.get((e.target, None), f"{e.target} set")
            )
            label = f"{short(e.type, e.line)} {word}"
        else:
            continue
        texts = by_step.setdefault(e.step, [])
        if label not in texts:
            texts.append(label)
    out = []
    for step in sorted(by_step):
        merged: list[str] = []
        for label in by_step[step]:  # "QAT observers off" + "QAT BN stats frozen": one label
            if (
                merged
                and label.startswith("QAT ")
                and merged[-1].startswith("QAT ")
                and "start" not in label
            ):
                merged[-1] += ", " + label[len("QAT ") :]
            else:
                merged.append(label)
        out.append((step, ", ".join(merged)))
    return out


def _phases(events: Sequence[Event]) -> dict[tuple[str, int], tuple[int, int | None]]:
    """``(type, line) -> (start step, end step or None)`` of the modifiers drawn as phases."""
    out: dict[tuple[str, int], tuple[int, int | None]] = {}
    for e in events:
        if _phase(e.type) is None:
            continue
        key = (e.type, e.line)
        if e.action == "start" and key not in out:
            if e.target == "trainable" and e.value is True:
                continue
            out[key] = (e.step, None)
        elif e.action == "end" and key in out:
            out[key] = (out[key][0], e.step)
    return out


def _label_markers(fig: Any, top: Any, markers: list[tuple[int, str]], S: int) -> None:
    """Write the marker labels above the top panel, as ticks of a secondary x axis.

    Markers closer than one text line are merged into one label. Labels lean at 35 degrees
    (broken into lines of about 30 characters when there is room), or stand upright when the
    markers are too close for that.
    """
    import math as _m

    fig.canvas.draw()
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
    texts = [", ".join(t) for _, t in groups]
    gaps = [(b - a) * px_per_epoch for a, b in zip(xs, xs[1:], strict=False)]
    lean = _m.sin(_m.radians(35))
    wrapped = [_wrap(t) for t in texts]
    if all(g * lean >= (w.count("\n") + 1) * line_px for g, w in zip(gaps, wrapped, strict=False)):
        labels, rotation = wrapped, 35
    elif all(g * lean >= line_px for g in gaps):
        labels, rotation = texts, 35
    else:
        labels, rotation = texts, 90
    sec = top.secondary_xaxis("top")
    sec.set_xticks(xs, labels)
    sec.tick_params(axis="x", length=0, labelsize=9, rotation=rotation)
    for label in sec.get_xticklabels():
        label.set_horizontalalignment("left")
        label.set_verticalalignment("bottom")
        label.set_rotation_mode("anchor")
    # a label near the right edge may run past the figure: make room for it
    fig.canvas.draw()
    width = fig.bbox.width
    over = max((t.get_window_extent().x1 for t in sec.get_xticklabels()), default=0) - width
    if over > 0:
        fig.get_layout_engine().set(rect=(0, 0, 1 - (over + 8) / width, 1))


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


def plot(
    plan: Plan, path: str | Path, epochs: float | None = None, initial_lr: float | None = None
) -> None:
    """Draw the schedule to ``path`` (``.png`` or ``.svg``).

    Two panels over epochs: the learning rate (only when the recipe sets it or
    ``initial_lr`` is given) above the target sparsity of each pruning modifier (dots at its
    update steps). Dashed lines mark where modifiers start and end. Needs matplotlib
    (``pip install 'recipe-spec[plot]'``).
    """
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
    lr_changes = _lr_changes(events, initial_lr)
    has_lr = initial_lr is not None or any(e.target == "lr" for e in events)
    sparsity = _sparsity_tracks(events)
    markers = _markers(plan, events)

    fig = Figure(figsize=(11, 7.2 if has_lr else 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    if has_lr:
        ax_lr, ax_sp = fig.subplots(2, 1, sharex=True, height_ratios=[1, 1.35])
        axes = [ax_lr, ax_sp]
    else:
        ax_sp = fig.subplots(1, 1)
        ax_lr, axes = None, [ax_sp]

    name = Path(plan.recipe.path).name if plan.recipe.path else "recipe"
    total_epochs = x_end
    fig.suptitle(
        f"{name}: schedule at {S:,} steps per epoch "
        f"({total_epochs:g} epochs = {round(total_epochs * S):,} optimizer steps)",
        fontsize=13,
    )

    # learning rate
    lr_handle = None
    if ax_lr is not None:
        xs: list[float] = []
        ys: list[float] = []
        for step, value in lr_changes:
            if value is None:
                continue
            xs.append(step / S)
            ys.append(value)
        if xs:
            xs.append(x_end)
            ys.append(ys[-1])
            setters = sorted(
                {(e.type, e.line) for e in events if e.target == "lr"},
                key=lambda t: t[1],
            )
            label = "learning rate, param group 0"
            if setters:
                label += " (set by " + ", ".join(f"{t} line {ln}" for t, ln in setters) + ")"
            if initial_lr is not None:
                label += (
                    f"; {_lr_text(initial_lr)} before"
                    if setters
                    else f": --initial-lr {_lr_text(initial_lr)}"
                )
            steps_only = len(lr_changes) <= 12
            ax_lr.plot(
                xs,
                ys,
                drawstyle="steps-post" if steps_only else "default",
                color="tab:blue",
                lw=2,
                label=label,
            )
            positive = [y for y in ys if y > 0]
            if positive and len(positive) == len(ys) and max(ys) / min(ys) >= 20 and steps_only:
                ax_lr.set_yscale("log")
                ax_lr.set_ylim(min(ys) / 2.5, max(ys) * 2.5)
                ax_lr.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _lr_text(v)))
                ax_lr.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
                ax_lr.set_ylabel("learning rate (log scale)")
            else:
                ax_lr.set_ylabel("learning rate")
                ax_lr.set_ylim(0, max(ys) * 1.18 if max(ys) > 0 else 1)
                ax_lr.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _lr_text(v)))
            if steps_only:  # a few constant pieces: write each value on its piece
                pieces = [(xs[i], xs[i + 1], ys[i]) for i in range(len(xs) - 1)]
                for x0, x1, y in pieces:
                    if x1 - x0 < 0.06 * x_end and len(pieces) > 1:
                        continue
                    ax_lr.annotate(
                        _lr_text(y),
                        ((x0 + x1) / 2, y),
                        xytext=(0, 4),
                        textcoords="offset points",
                        ha="center",
                        va="bottom",
                        fontsize=9,
                        color="tab:blue",
                    )
            else:  # a curve: write where it starts and ends
                first_x, first_y = xs[0], ys[0]
                ax_lr.annotate(
                    _lr_text(first_y),
                    (first_x, first_y),
                    xytext=(4, 4),
                    textcoords="offset points",
                    fontsize=9,
                    color="tab:blue",
                    ha="left",
                    va="bottom",
                )
                last_i = len(ys) - 1
                ax_lr.annotate(
                    _lr_text(ys[last_i]),
                    (xs[last_i], ys[last_i]),
                    xytext=(-4, 6),
                    textcoords="offset points",
                    fontsize=9,
                    color="tab:blue",
                    ha="right",
                    va="bottom",
                )
            lr_handle = ax_lr.get_lines()[0]
        else:
            ax_lr.set_ylabel("learning rate")
            ax_lr.text(
                0.5,
                0.5,
                "no learning rate set before the first change (pass --initial-lr)",
                transform=ax_lr.transAxes,
                ha="center",
                va="center",
                color="0.4",
            )
        ax_lr.grid(True, alpha=0.3)

    # sparsity
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    colors = [
        "tab:orange",
        "tab:green",
        "tab:red",
        "tab:purple",
        "tab:brown",
        "tab:pink",
        "tab:olive",
        "tab:cyan",
    ]
    handles: list[Any] = []
    any_dots = False
    end_labels: list[float] = []
    for i, s in enumerate(sparsity.values()):
        color = colors[i % len(colors)]
        xs = [k / S for k, _ in s.updates]
        ys = [v for _, v in s.updates]
        end_x = x_end if s.released_at is None else (s.released_at + 1) / S
        dots = len(xs) <= 400
        any_dots = any_dots or dots
        ax_sp.plot(xs + [end_x], ys + [ys[-1]], drawstyle="steps-post", color=color, lw=2, zorder=2)
        if dots:
            ax_sp.plot(xs, ys, "o", color=color, ms=3.5 if len(xs) > 60 else 4.5, zorder=3)
        label = f"{s.type}, line {s.line}" + (
            f", group {s.group + 1}" if s.label.endswith(f"group {s.group + 1}") else ""
        )
        label += f": {ys[0]:.0%} \u2192 {ys[-1]:.0%}" if ys[0] != ys[-1] else f": {ys[0]:.0%}"
        label += f", {len(xs):,} updates"
        if s.released_at is not None:
            label += ", masks released at the end"
        handles.append(
            Line2D([], [], color=color, lw=2, marker="o" if dots else None, ms=4.5, label=label)
        )
        # the final target, written at the right end of its line (clear of the others)
        y = ys[-1]
        below = any(abs(y - u) < 0.05 for u in end_labels)
        end_labels.append(y)
        ax_sp.annotate(
            f"{y:.0%}",
            (end_x, y),
            xytext=(-3, -13 if below else 4),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=9,
            color=color,
            fontweight="bold",
        )
    for (kind, line), (k0, k1) in _phases(events).items():
        what, color = _phase(kind) or (kind, "tab:gray")
        x1 = x_end if k1 is None else k1 / S
        ax_sp.axvspan(k0 / S, x1, color=color, alpha=0.16, lw=0, zorder=0)
        handles.append(Patch(color=color, alpha=0.3, label=f"{what} ({kind}, line {line})"))
    ax_sp.set_ylim(0, 1.08)
    ax_sp.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax_sp.set_ylabel("target sparsity (% of weights zero)")
    ax_sp.grid(True, alpha=0.3)
    # one legend, below the picture, where it hides nothing
    handles = ([lr_handle] if lr_handle is not None else []) + handles
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=2 if len(handles) > 2 else len(handles),
            fontsize=9,
            frameon=False,
            title="dots: steps where a target sparsity is updated" if any_dots else None,
            title_fontsize=9,
        )
    if not sparsity:
        ax_sp.text(
            0.5,
            0.5,
            "no gradual pruning modifier in this recipe",
            transform=ax_sp.transAxes,
            ha="center",
            va="center",
            color="0.4",
        )
    ax_sp.set_xlabel(f"epoch ({S:,} optimizer steps each)")
    ax_sp.set_xlim(-0.012 * x_end, x_end * 1.012)
    ax_sp.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    # start / end markers, labelled along the top of the upper panel
    top = axes[0]
    for ax in axes:
        for k, _ in markers:
            ax.axvline(k / S, color="0.35", ls="--", lw=1, zorder=1)
    if markers:
        _label_markers(fig, top, markers, S)
    # no date or software version in the file, so the same plan draws the same bytes
    metadata: dict[str, Any] = {"Software": None} if suffix == ".png" else {"Date": None}
    from .atomic import replacing

    with replacing(path) as tmp:  # the picture appears whole or not at all
        fig.savefig(tmp, dpi=120, metadata=metadata, format=suffix.lstrip("."))
