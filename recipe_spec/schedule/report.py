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
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..recipe.model import Group, Recipe, Stage
from .events import PlanError
from .plan import compile_plan

if TYPE_CHECKING:
    from .events import Event
    from .plan import Plan

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
    "plan_error_position",
    "plan_error_text",
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


_PLAIN = frozenset({str, int, bool, type(None)})


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


def schedule_rows(plan: Plan, epochs: float | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """One JSON-safe row per event (fields :data:`COLUMNS`), in the order they happen.

    ``epochs`` given: only the steps before ``epochs * steps_per_epoch``; otherwise up to the
    last event (or ``plan.total_steps`` when a modifier never ends). ``limit`` given: at most
    ``limit + 1`` rows (so that a caller sees that there are more than ``limit``).
    ``modifier`` is the modifier's type and ``line`` the line of its ``!Tag`` in the file.
    Rows of the events of one modifier's selection share its ``params`` list.
    """
    stop = None if epochs is None else _steps_before(epochs, plan.steps_per_epoch)
    events = plan.iter_events(0, stop)
    if limit is not None:
        events = itertools.islice(events, limit + 1)
    plain = _PLAIN
    shared: dict[int, tuple[Any, Any]] = {}  # id(params) -> (params, its JSON form)
    out = []
    append = out.append
    for e in events:
        value, params = e.value, e.params
        c = value.__class__
        if c not in plain and not (c is float and value - value == 0.0):  # finite floats as is
            value = _jsonable(value)
        if params.__class__ not in plain:
            known = shared.get(id(params))
            if known is None or known[0] is not params:
                known = shared[id(params)] = (params, _jsonable(params))
            params = known[1]
        append({"step": e.step, "epoch": e.epoch, "modifier": e.type, "line": e.line,
                "action": e.action, "target": e.target, "value": value, "params": params})
    return out


# -- series --------------------------------------------------------------------------------
def _applies_to_group0(params: Any) -> bool:
    if params is None:
        return True
    if isinstance(params, (list, tuple, set, frozenset)):
        return any(p == 0 and not isinstance(p, bool) for p in params)
    return params == 0


def lr_changes(
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
    return _expand(lr_changes(plan.iter_events(0, n), initial_lr), n)


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


def sparsity_tracks(events: Sequence[Event]) -> dict[str, SparsitySeries]:
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
    out = sparsity_tracks(list(plan.iter_events(0, n)))
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
    params_cells: dict[int, tuple[Any, str]] = {}  # rows of one selection share its list

    plain_cells: dict[tuple[Any, ...], str] = {}

    def params_cell(r: Mapping[str, Any]) -> str:
        params = r["params"]
        if params.__class__ is list:
            known = params_cells.get(id(params))
            if known is None or known[0] is not params:
                known = params_cells[id(params)] = (params, _params_cell(r))
            return known[1]
        if params.__class__ not in _PLAIN:
            return _params_cell(r)
        key = (params.__class__, params, r["target"])
        text = plain_cells.get(key)
        if text is None:
            text = plain_cells[key] = _params_cell(r)
        return text

    cell = _cell
    body = [
        (
            str(r["step"]),
            f"{r['epoch']:.6g}",
            str(r["modifier"]),
            str(r["line"]),
            str(r["action"]),
            str(r["target"]),
            f"{r['value']:.6g}" if r["value"].__class__ is float else cell(r["value"]),
            params_cell(r),
        )
        for r in rows
    ]
    widths = [max(len(h), max(map(len, column))) for h, column in zip(header, zip(*body, strict=True), strict=True)]
    w0, w1, w2, w3, w4, w5, w6, w7 = widths

    def line(c: Sequence[str]) -> str:  # columns 0, 1 and 3 right-aligned
        return "  ".join((c[0].rjust(w0), c[1].rjust(w1), c[2].ljust(w2), c[3].rjust(w3), c[4].ljust(w4),
                          c[5].ljust(w5), c[6].ljust(w6), c[7].ljust(w7))).rstrip()

    out = [line(header), line(["-" * w for w in widths])]
    out += map(line, body)
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
    "min_epochs", "events": rows}``; ``meta`` gives the middle keys. One line per event
    (350,000 events take about a second, where an indented dump took several)."""
    head: dict[str, Any] = {"version": JSON_FORMAT_VERSION}
    for key in ("recipe", "steps_per_epoch", "epochs", "max_epochs", "min_epochs"):
        head[key] = _jsonable(meta.get(key))
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    encode = json.JSONEncoder().encode  # one compact line per event, C-speed
    events = ",\n    ".join(map(encode, rows))
    lines.append(f'  "events": [\n    {events}\n  ]' if events else '  "events": []')
    return "\n".join(lines) + "\n}\n"


def plan_error_position(recipe: Any, text: str) -> str:
    """``line:column`` of the modifier a PlanError message names (``TYPE (line N)``)."""
    match = re.search(r"\(line (\d+)\)", text)
    if match is None:
        return "1:1"
    line = int(match.group(1))
    for m in recipe.modifiers:
        if m.span.line == line:
            return f"{line}:{m.span.column}"
    return f"{line}:1"


def plan_error_text(recipe: Any, steps_per_epoch: int, exc: Exception) -> str:
    """The PlanError message, naming the modifier and its line when it does not already."""
    text = str(exc)
    if "(line " in text:
        return text
    for m in recipe.modifiers:
        alone = Recipe(stages=(Stage(None, (Group("modifiers", (m,)),)),))
        try:
            compile_plan(alone, steps_per_epoch)
        except PlanError:
            return f"{m.type} (line {m.span.line}): {text}"
    return text
