"""The training path of the fuzz: a recipe that loads is run the way a training script runs it,
on a tiny PyTorch model whose parameter names the fuzz generator's patterns match.

:func:`train_once` does ``ScheduledModifierManager.from_yaml(text)``, ``manager.modify(model,
optimizer, steps_per_epoch)`` (with a grad sampler for M-FAC and OBS and ``distillation_teacher=
"self"``), a bounded number of optimizer steps that cover the recipe's events (the schedule is
compressed by the choice of ``steps_per_epoch``), ``loss_update`` in each step, and
``manager.finalize(model)``. The outcomes a user may see:

- ``"train-ok"``: it ran and finalized;
- ``"train-refused-at-from_yaml"`` / ``"train-refused-at-modify"``: :class:`~recipe_spec.RecipeError`
  from ``from_yaml`` or ``modify()``,
  every diagnostic of it *located* (a line >= 1 and a message);
- ``"train-gradient-budget"``: M-FAC / OBS asked for more than :data:`GRADIENT_BUDGET`
  gradients (seconds of sampling on this machine, which the recipe asked for): stopped there;
- ``"train-diverged"``: the loss became NaN or infinite (a learning rate the recipe set, such
  as ``gamma: 10000``): a training loop stops there, as this one does; or the library reported
  the divergence itself (:class:`~recipe_spec.pruning.magnitude.NonFiniteWeightsError`, naming
  the parameter and the step: weights that went infinite while the loss stayed finite, behind
  a ReLU);
- ``"train-plan-error"``: a :class:`~recipe_spec.schedule.events.PlanError` from ``modify()``
  (the schedule at this ``steps_per_epoch``) whose message is located: it names the modifier
  and its recipe line (``"(line N)"``, ``"line N"`` or ``file:N:``).

Anything else raises :class:`FuzzFailure`: any exception from ``from_yaml``/``modify()`` that is
not one of the two above or is not located, and **any** exception during the training steps or
``finalize`` (an ``IndexError``, ``KeyError``, ``RuntimeError``, ``OverflowError`` ... is a "raw
error mid-training", whatever its message). A run over the time limit (CPU time of the process,
so that a busy machine does not pass for a hang) raises :class:`Hang`.
"""

from __future__ import annotations

import json
import logging
import random
import re
import warnings
from typing import Any

import torch
from fuzz_inputs import FuzzFailure, Hang, _scalar, make_input, time_limit
from torch import nn

from recipe_spec import RecipeError, ScheduledModifierManager
from recipe_spec.modifiers import all_specs, spec
from recipe_spec.pruning.magnitude import NonFiniteWeightsError
from recipe_spec.schedule.events import PlanError

__all__ = ["TinyNet", "train_once", "MAX_STEPS", "LOCATED", "make_training_input", "trainable_recipe", "renamed_corpus"]

#: the most optimizer steps one input runs
MAX_STEPS = 40
#: what makes a message located: the recipe line it is about
LOCATED = re.compile(r"\(line \d+\)|\bline \d+\b|:\d+:")

logging.getLogger("recipe_spec").setLevel(logging.ERROR)
torch.set_num_threads(1)  # a tiny model: threads cost more than they give
torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)  # its first use imports torch._dynamo (seconds)


class _Query(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(16, 16)


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.Module()
        self.attention.add_module("self", _Query())


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList([_Layer()])


class TinyNet(nn.Module):
    """The names of the fuzz manifest (``conv1``, ``bn1``, ``fc1``, ``fc2``,
    ``encoder.layer.0.attention.self.query``), a few hundred parameters, a step in about a ms."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.bn1 = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(16, 16)
        self.encoder = _Encoder()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))  # (B, 8, 4, 4)
        h = nn.functional.adaptive_avg_pool2d(h, (2, 1)).flatten(1)  # (B, 16)
        h = torch.relu(self.fc1(h))
        h = h + self.encoder.layer[0].attention.self.query(h)
        return self.fc2(h)


_INPUTS = torch.randn(4, 3, 6, 6, generator=torch.Generator().manual_seed(0))
_TARGETS = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
#: the most gradients one input's M-FAC / OBS pruning may sample (each is a forward and backward
#: pass, a few ms): a recipe asking for more ends as "train-gradient-budget", not as a hang
GRADIENT_BUDGET = 256


class GradientBudget(BaseException):
    """The grad sampler gave :data:`GRADIENT_BUDGET` gradients (BaseException: the library's
    ``except Exception`` never swallows it, as it would never swallow a user's interrupt)."""


_SAMPLED = [0]


def _loader(kwargs: Any) -> Any:
    """A loader without end: as many gradients as a recipe asks for, up to the budget."""
    while True:
        _SAMPLED[0] += 1
        if _SAMPLED[0] > GRADIENT_BUDGET:
            raise GradientBudget
        yield (_INPUTS,), {}, _TARGETS


_SAMPLER = {"data_loader_builder": _loader, "loss_function": nn.functional.mse_loss}


def _located_error(exc: BaseException, what: str) -> str:
    """The outcome of an error raised at ``from_yaml``/``modify()``, or FuzzFailure."""
    if isinstance(exc, RecipeError):
        diagnostics = list(exc.diagnostics)
        if not diagnostics:
            raise FuzzFailure(f"{what}: a RecipeError without diagnostics: {exc}")
        for d in diagnostics:
            if not (isinstance(d.line, int) and d.line >= 1 and d.message):
                raise FuzzFailure(f"{what}: a diagnostic without a line or message: {d!r}")
        return f"train-refused-at-{what}"
    if isinstance(exc, PlanError) and LOCATED.search(str(exc)):
        return "train-plan-error"
    raise FuzzFailure(f"{what}: {type(exc).__name__} (not a located error): {exc}") from exc


def _schedule(manager: ScheduledModifierManager, seed: int) -> tuple[int, int]:
    """(steps_per_epoch, steps): the recipe's last epoch within MAX_STEPS where it can be."""
    try:
        last = max(0, min(int(manager.max_epochs), 10**6))
    except (OverflowError, ValueError):
        last = 10**6
    spe = max(1, min(4, (MAX_STEPS - 2) // max(last, 1)))
    if seed % 3 == 0:
        spe = 2  # as a training script with a fixed loader would have it
    return spe, min(MAX_STEPS, last * spe + 2)


def train_once(text: str, seed: int = 0, limit: float = 5.0) -> str:
    """Run ``text`` through the training path (see the module docstring)."""
    if "\n" not in text and "\r" not in text:
        text += "\n"  # recipe text, never a path
    torch.manual_seed(seed)
    model = TinyNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stage = "from_yaml"
    _SAMPLED[0] = 0
    try:
        with time_limit(limit, "the training path"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                manager = ScheduledModifierManager.from_yaml(text)
                stage = "modify"
                spe, steps = _schedule(manager, seed)
                sampler = _SAMPLER if any(spec(m.type) is not None and spec(m.type).scores in ("mfac", "obs")
                                          for m in manager._scheduled.modifiers) else None
                optimizer = manager.modify(model, optimizer, steps_per_epoch=spe, grad_sampler=sampler,
                                           distillation_teacher="self")
            except (FuzzFailure, Hang):
                raise
            except Exception as exc:  # noqa: BLE001 - sorted into located or not
                return _located_error(exc, stage)
            keyed = any(m.args.get("teacher_input_keys") for m in manager._scheduled.modifiers)
            for k in range(steps):
                stage = f"training step {k} (steps_per_epoch={spe})"
                optimizer.zero_grad()
                x = _INPUTS
                out = model(x)
                loss = nn.functional.mse_loss(out, _TARGETS)
                if not torch.isfinite(loss):  # the recipe's learning rate (gamma: 10000 ...) diverged it
                    return "train-diverged"
                # keys pick the teacher's inputs from a mapping; a script feeding tensors names them
                loss = manager.loss_update(loss, student_outputs=out, student_inputs=x,
                                           teacher_inputs=x if keyed else None)
                loss.backward()
                optimizer.step()
            stage = "finalize"
            manager.finalize(model)
    except (FuzzFailure, Hang):
        raise
    except GradientBudget:
        return "train-gradient-budget"
    except NonFiniteWeightsError as exc:  # the library's own report of a diverged run, located
        if "diverged" not in str(exc) or "step" not in str(exc):
            raise FuzzFailure(f"unlocated divergence report at {stage}: {exc}"[:800]) from exc
        return "train-diverged"
    except Exception as exc:  # noqa: BLE001 - the raw error mid-training being looked for
        raise FuzzFailure(f"raw error mid-training at {stage}: {type(exc).__name__}: {exc}"[:800]) from exc
    return "train-ok"


# -- inputs that reach the training steps --------------------------------------------------------
#: selectors the tiny model matches, and a few it does not
SELECTORS = [
    "__ALL_PRUNABLE__", "__ALL__", "re:.*weight", "re:conv.*", "fc1.weight", "fc2.weight", "conv1.weight",
    "re:.*query.weight", "encoder.layer.0.attention.self.query.weight", "re:fc.*", "re:.*bias", "bn1.weight",
    "re:^fc[12]\\.weight$", "fc3.weight",
]
#: layer names and types (QAT ``ignore``, ``layers`` ...)
LAYERS = ["conv1", "bn1", "fc1", "fc2", "encoder.layer.0.attention.self.query", "Linear", "Conv2d", "BatchNorm2d",
          "re:fc.*", "ReLU"]


def _epoch(rnd: random.Random) -> Any:
    return rnd.choice([-1, 0, 0, 0.5, 1, 1, 2, 3, 4.5, 6, 10, round(rnd.uniform(0, 8), 2), 1e-3, 19.999])


def _value(rnd: random.Random, key: str, value: Any, window: tuple[float, float]) -> Any:
    start, end = window
    if isinstance(value, bool) or value is None:
        return rnd.choice([value, not value]) if isinstance(value, bool) else value
    if key == "params":
        return rnd.choice([rnd.choice(SELECTORS), rnd.sample(SELECTORS, rnd.randint(1, 3))])
    if key == "start_epoch":
        return start
    if key == "end_epoch":
        return end
    if key.endswith("epoch") and isinstance(value, (int, float)):
        return rnd.choice([start, max(start, 0) + 0.5, end if end > 0 else start + 1])
    if "sparsity" in key and isinstance(value, (int, float)):
        return rnd.choice([0, 0.05, 0.5, 0.8, 0.9, 0.99, round(rnd.random() * 0.99, 3)])
    if key == "update_frequency":
        return rnd.choice([-1, 0.5, 1, 2, 0.25, 1e-3, 3.7])
    if key == "milestones":
        top = end if end > 0 else 8
        return sorted({round(rnd.uniform(max(start, 0), top), 1) for _ in range(rnd.randint(1, 3))} - {top}) or [max(start, 0)]
    if isinstance(value, (int, float)):
        return type(value)(value * rnd.choice([0.5, 1, 1, 2]))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return rnd.sample(LAYERS, rnd.randint(1, 3))
    if isinstance(value, dict) and key != "num_grads":
        return {k: _value(rnd, str(k), v, window) for k, v in value.items()}
    return value


def trainable_recipe(rnd: random.Random) -> str:
    """One to three catalogue modifiers from their documented examples, with epochs within a
    few steps, the tiny model's names, and now and then a hostile value or a dropped argument."""
    specs = all_specs()
    lines = [rnd.choice(["", "num_epochs: 4\n", "version: 1.1.0\n"]) + "modifiers:"]
    for name in rnd.sample(sorted(specs), rnd.randint(1, 3)):
        lines.append(f"  - !{name}")
        start = rnd.choice([-1, 0, 0, 0.5, 1, 2, 3, 1e-3])
        end = rnd.choice([-1, max(start, 0) + rnd.choice([0.5, 1, 2, 3, 4.5, 1e-3, 12])])
        for key, value in dict(specs[name].example or {}).items():
            if rnd.random() < 0.03:
                continue
            new = _value(rnd, key, value, (start, end)) if rnd.random() < 0.9 else value
            text = _scalar(rnd) if rnd.random() < 0.03 else json.dumps(new)
            lines.append(f"    {key}: {text}")
    return "\n".join(lines) + "\n"


_NAME = re.compile(r"re:[^\s,'\"\]]+|[\w.]*\.weight\b")


def renamed_corpus(rnd: random.Random, texts: list[str]) -> str:
    """A corpus recipe whose parameter names and patterns are the tiny model's, numbers scaled
    down now and then: real recipes (quantization, distillation, AC/DC ...) that reach training."""
    text = _NAME.sub(lambda m: rnd.choice(SELECTORS), rnd.choice(texts))
    if rnd.random() < 0.5:
        text = re.sub(r"(?<=epoch: )\d+(\.\d+)?", lambda m: repr(_epoch(rnd)), text)
    return text


def make_training_input(rnd: random.Random, texts: list[str]) -> str:
    """An input of the ``--train`` campaign: half of them built to reach the training steps."""
    kind = rnd.random()
    if kind < 0.35:
        return trainable_recipe(rnd)
    if kind < 0.5:
        return renamed_corpus(rnd, texts)
    return make_input(rnd, texts)
