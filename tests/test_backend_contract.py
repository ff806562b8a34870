"""The backend contract: each backend declares what it runs, support follows from those
declarations alone, the core names no backend, and nothing a backend cannot do runs half-way."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import REPO

import recipe_spec
from recipe_spec.diagnostics import RecipeError
from recipe_spec.modifiers import CAPABILITIES, all_specs, supported_by
from recipe_spec.registry import Backend, available_backends, get_backend, supported_modifiers

RECIPES = {
    "OBSPruningModifier": "  - !OBSPruningModifier {params: [fc.weight], init_sparsity: 0.1, final_sparsity: 0.5, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n",
    "MFACPruningModifier": "  - !MFACPruningModifier {params: [fc.weight], init_sparsity: 0.1, final_sparsity: 0.5, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n",
    "DistillationModifier": "  - !DistillationModifier {start_epoch: 0, end_epoch: 2, hardness: 0.5, temperature: 2.0}\n",
    "ACDCPruningModifier": "  - !ACDCPruningModifier {params: [fc.weight], compression_sparsity: 0.5, start_epoch: 0, end_epoch: 4, update_frequency: 1}\n",
    "MovementPruningModifier": "  - !MovementPruningModifier {params: [fc.weight], init_sparsity: 0.1, final_sparsity: 0.5, start_epoch: 0, end_epoch: 2, update_frequency: 1}\n",
}
#: For each modifier above, a capability it needs: a backend without it must refuse it.
NEEDS = {"OBSPruningModifier": "scores:obs", "MFACPruningModifier": "scores:mfac", "DistillationModifier": "loss",
         "ACDCPruningModifier": "acdc", "MovementPruningModifier": "scores:movement"}


@pytest.mark.parametrize("name", ["torch", "keras"])
def test_backends_fulfil_the_contract(name: str) -> None:
    backend = get_backend(name)
    assert isinstance(backend, Backend)
    assert backend.name == name
    assert backend.capabilities <= CAPABILITIES, backend.capabilities - CAPABILITIES
    assert not backend.owns(object()) and backend.unsupported_model(object()) is None


def test_support_is_derived_from_capabilities() -> None:
    for name in available_backends():
        caps = get_backend(name).capabilities
        expected = {n for n, s in all_specs().items() if s.runtime and s.needs <= caps}
        assert supported_modifiers(name) == expected
        assert set(RECIPES) <= supported_modifiers(name)  # every one runs on both (tests per modifier)


def test_backends_json_is_the_derived_support() -> None:
    data = json.loads((REPO / "schemas" / "backends.json").read_text(encoding="utf-8"))
    assert set(data["backends"]) == set(available_backends())
    for name, entry in data["backends"].items():
        assert sorted(entry["modifiers"]) == sorted(supported_modifiers(name)), name
        assert sorted(entry["capabilities"]) == sorted(get_backend(name).capabilities), name


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_core_names_no_backend() -> None:
    """No code of the core (docstrings and messages aside) is written for one backend: no
    string is a backend's name or imports a backend package."""
    found = []
    for path in sorted((REPO / "recipe_spec").rglob("*.py")):
        for line, text in _string_constants(path):
            if text in ("torch", "keras", "tensorflow") or "recipe_spec_torch" in text or "recipe_spec_keras" in text:
                found.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
        source = path.read_text(encoding="utf-8")
        assert "import recipe_spec_torch" not in source and "from recipe_spec_torch" not in source, path
        assert "import recipe_spec_keras" not in source and "from recipe_spec_keras" not in source, path
    assert not found, "\n".join(found)


def _recipe(body: str) -> recipe_spec.Recipe:
    return recipe_spec.loads("modifiers:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}\n" + body)


@pytest.fixture
def without(monkeypatch):
    """Take one capability away from a backend for the test."""
    def take(backend: str, capability: str) -> None:
        cls = type(get_backend(backend))
        monkeypatch.setattr(cls, "capabilities", frozenset(cls.capabilities) - {capability})
    return take


@pytest.mark.parametrize("modifier", sorted(RECIPES))
def test_torch_refuses_what_it_cannot_run_at_modify(modifier: str, without) -> None:
    torch = pytest.importorskip("torch")
    without("torch", NEEDS[modifier])
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = _recipe(RECIPES[modifier]).compile("torch")
    with pytest.raises(RecipeError) as info:
        manager.modify(model, opt, steps_per_epoch=2)
    (d,) = info.value.diagnostics
    assert (d.code, d.line) == ("B001", 3) and modifier in d.message and NEEDS[modifier] in d.message


@pytest.mark.parametrize("modifier", sorted(RECIPES))
def test_keras_refuses_what_it_cannot_run_at_modify(modifier: str, without) -> None:
    keras = pytest.importorskip("keras")
    without("keras", NEEDS[modifier])
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="fc")(inputs))
    manager = _recipe(RECIPES[modifier].replace("fc.weight", "fc/kernel")).compile("keras")
    with pytest.raises(RecipeError) as info:
        manager.modify(model, keras.optimizers.SGD(0.1), steps_per_epoch=2)
    (d,) = info.value.diagnostics
    assert (d.code, d.line) == ("B001", 3) and modifier in d.message and NEEDS[modifier] in d.message


def test_an_event_without_a_handler_is_an_error_not_dropped() -> None:
    torch = pytest.importorskip("torch")
    from recipe_spec.schedule.events import Event

    model = torch.nn.Linear(4, 2)
    manager = _recipe("").compile("torch")
    manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    event = Event(0, 0.0, 0, "ACDCPruningModifier", 2, "start", "acdc", 0.5)
    with pytest.raises(NotImplementedError, match="no handler for 'acdc' events"):
        manager.apply(event)


def test_supported_by_needs_every_capability() -> None:
    assert supported_by(set()) == {"EpochRangeModifier"}
    gmp = all_specs()["GMPruningModifier"]
    assert "GMPruningModifier" not in supported_by(gmp.needs - {"masks"})
    assert "GMPruningModifier" in supported_by(gmp.needs)


def test_keras_set_learning_rate_really_sets_it() -> None:
    """SetLearningRateModifier, listed for keras in backends.json, changes the rate the
    optimizer steps with from its start step on, and not before."""
    keras = pytest.importorskip("keras")
    import numpy as np

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="fc")(inputs))
    manager = recipe_spec.loads(
        "modifiers:\n  - !SetLearningRateModifier {learning_rate: 0.01, start_epoch: 1}\n"
    ).compile("keras")
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.1), steps_per_epoch=2)
    lrs: list[float] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    model.compile(optimizer=optimizer, loss="mse")
    x, y = np.ones((16, 4), "float32"), np.zeros((16, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[*callbacks, Record()])
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01])


def test_unknown_modifier_refused_at_modify() -> None:
    """A modifier no declaration knows never runs silently as nothing: M001 before modify()
    touches the model (the backend's runtime refuses it when it is compiled)."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 2)
    with pytest.raises(RecipeError) as info:
        manager = _recipe("  - !FooPruningModifier {params: [weight], start_epoch: 0}\n").compile("torch")
        manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    (d,) = info.value.diagnostics
    assert (d.code, d.line) == ("M001", 3) and "FooPruningModifier" in d.message
