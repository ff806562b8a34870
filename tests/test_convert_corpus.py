"""``recipe-spec convert`` on SparseML's own ``!Modifier`` recipes (the shared corpus).

Every corpus recipe whose modifiers all have exact stage/group twins (with EpochRangeModifier
left out, ``--drop-epoch-range``) converts, and:

- trains step for step the same on PyTorch as the original: the recipe's parameter names
  rewritten onto a tiny chain of linear layers (one layer per name), both recipes loaded with
  ``ScheduledModifierManager``, the same weights and batches, and per step the weights, every
  mask, its applied sparsity, the learning rate and whether QAT is on compared exactly
  (the recipes run: one per distinct shape of converted recipe, which covers every modifier
  type with a twin);
- round-trips: stage/group -> ``!Modifier`` -> stage/group gives the same text back.

The numbers the runs are compared against are the original recipe's own run, not ours.
"""

from __future__ import annotations

import re
import time
from functools import cache

import numpy as np
import pytest
from conftest import corpus_rows

from recipe_spec import ScheduledModifierManager, loads
from recipe_spec.convert import Target, convert_file, convert_text
from recipe_spec.text.source import read_source

torch = pytest.importorskip("torch")
#: a few steps of a long recipe: a modifier that has not reached its end is expected
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:.*has not reached its final sparsity:UserWarning")]

STAGE, MODIFIER = Target.parse("stage"), Target.parse("modifier")
#: The twin-having ``!Modifier`` types the corpus exercises. Its two MagnitudePruningModifier
#: recipes use block masks (``mask_type: [1, 4]``), which have no twin: tests/test_convert.py
#: runs that type step for step.
TWIN_TYPES = {"GMPruningModifier", "ConstantPruningModifier", "QuantizationModifier"}
MAX_STEPS = 24


@cache
def _converted() -> list[tuple[str, str, str]]:
    """(path, source YAML, stage/group text) of every ``!Modifier`` corpus recipe that converts."""
    out = []
    for row in corpus_rows():
        if not row["format"].startswith("legacy") or row["parse_ok"] != "yes":
            continue
        result = convert_file(row["path"], STAGE, drop_epoch_range=True)
        if result.ok:
            assert result.text is not None
            out.append((row["path"], read_source(row["path"]).yaml_text, result.text))
    return out


def test_corpus_recipes_with_twins_convert() -> None:
    found = _converted()
    assert len(found) >= 40, len(found)
    types = {m.type for _, text, _ in found for m in loads(text).modifiers}
    assert TWIN_TYPES <= types, TWIN_TYPES - types


def test_round_trip_stage_modifier_stage() -> None:
    start = time.perf_counter()
    for path, _, stage in _converted():
        back = convert_text(stage, "stage.yaml", MODIFIER)
        assert back.ok and back.text is not None, (path, [r.what for r in back.refusals])
        again = convert_text(back.text, "modifier.yaml", STAGE)
        assert again.ok, (path, [r.what for r in again.refusals])
        assert again.text == stage, path
        assert loads(again.text) == loads(stage)
    assert time.perf_counter() - start < 120


# -- step for step on PyTorch ------------------------------------------------------------------

_NAME = re.compile(r"re:[^\s,'\"\]]+|[\w.]*\.weight\b")


def _on_tiny(text: str) -> tuple[str, int]:
    """``text`` with each distinct parameter name or pattern written as one layer's of the
    tiny chain (``layers.<i>.weight``), and how many layers that takes."""
    names: dict[str, str] = {}

    def sub(match: re.Match[str]) -> str:
        key = match.group(0)
        if key not in names:
            names[key] = f"layers.{len(names)}.weight"
        return names[key] if not key.startswith("re:") else "re:" + re.escape(names[key]) + "$"

    text = _NAME.sub(sub, text)
    ignored = {str(v) for m in loads(text).modifiers for v in (m.args.get("ignore") or ())}
    for name in sorted(ignored, key=len, reverse=True):  # QAT's module names and classes
        if "." in name and name not in names:
            names[name] = f"layers.{len(names)}"
        new = names.get(name, "LayerNorm")
        text = re.sub(rf"(?m)^(\s*-\s*){re.escape(name)}\s*$", lambda m, new=new: m.group(1) + new, text)
    return text, len(names) + 2  # two layers no name selects


class Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
        self.norm = torch.nn.LayerNorm(8)  # the layer type a QAT recipe's ignored classes become

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.norm(x)


def _steps(text: str) -> tuple[int, int]:
    """Steps per epoch and steps that reach the recipe's last event (at most MAX_STEPS)."""
    recipe = loads(text)
    ends = [float(v) for m in recipe.modifiers for k, v in m.args.items()
            if (k.endswith("epoch") or k in ("end", "start")) and isinstance(v, (int, float))
            and not isinstance(v, bool) and v >= 0]
    last = max(ends, default=1.0)
    per_epoch = max(1, min(4, int(MAX_STEPS // (last + 1))))
    return per_epoch, min(MAX_STEPS, int(last * per_epoch) + 2)


def _run(text: str, layers: int, per_epoch: int, steps: int) -> list[dict]:
    torch.manual_seed(0)
    model = Chain(layers)
    with torch.no_grad():  # zeros for ConstantPruningModifier to hold
        for p in model.parameters():
            p[p.abs() < 0.1] = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(steps, 4, 8, generator=g), torch.randn(steps, 4, 8, generator=g)
    manager = ScheduledModifierManager.from_yaml(text)
    optimizer = manager.modify(model, optimizer, steps_per_epoch=per_epoch)
    rows = []
    for k in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[k]), targets[k]).backward()
        optimizer.step()
        rows.append({
            "lr": optimizer.param_groups[0]["lr"],
            "masks": {n: (e.mask.numpy().copy(), e.applied_sparsity)
                      for n, e in manager.runtime.masks.params.items()},
            "weights": {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
            "qat": manager.autocast_enabled(),
        })
    manager.finalize(model)
    return rows


def _shape(stage: str) -> tuple:
    recipe = loads(stage)
    return tuple(sorted({(m.type, tuple(sorted(m.raw_args)), isinstance(m.args.get("targets"), str))
                         for m in recipe.modifiers}))


def _sample() -> list[tuple[str, str, str]]:
    """One recipe per distinct shape of converted recipe (modifier types and arguments)."""
    seen: dict[tuple, tuple[str, str, str]] = {}
    for item in sorted(_converted(), key=lambda item: len(item[2])):  # the shortest of each
        seen.setdefault(_shape(item[2]), item)
    return list(seen.values())


def test_converted_corpus_trains_step_for_step_the_same() -> None:
    sample = _sample()
    covered = {m.type for _, text, _ in sample for m in loads(text).modifiers}
    assert TWIN_TYPES <= covered, TWIN_TYPES - covered
    pruned = 0
    for path, text, _ in sample:
        source, layers = _on_tiny(text)
        converted = convert_text(source, "tiny.yaml", STAGE, drop_epoch_range=True)
        assert converted.ok and converted.text is not None, (path, [r.what for r in converted.refusals])
        per_epoch, steps = _steps(source)
        original, twin = _run(source, layers, per_epoch, steps), _run(converted.text, layers, per_epoch, steps)
        for k, (a, b) in enumerate(zip(original, twin, strict=True)):
            assert a["lr"] == b["lr"] and a["qat"] == b["qat"], (path, k)
            assert a["masks"].keys() == b["masks"].keys(), (path, k)
            for name, (mask, applied) in a["masks"].items():
                assert applied == b["masks"][name][1], (path, k, name)
                assert np.array_equal(mask, b["masks"][name][0]), (path, k, name)
            for name, w in a["weights"].items():
                assert np.array_equal(w, b["weights"][name]), (path, k, name)
        pruned += any(s and s > 0 for r in original for _, s in r["masks"].values())
    assert pruned >= len(sample) // 2, (pruned, len(sample))
