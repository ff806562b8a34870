"""Resume refuses a state saved with another recipe (issue: a changed final_sparsity was taken
silently; with a modifier removed, saved masks attached to the wrong modifiers), naming what
changed; `allow_recipe_change=True` continues on purpose."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

from recipe_spec import ScheduledModifierManager, loads  # noqa: E402
from recipe_spec.runtime.resume import RecipeChangedError, identity, recipe_changes, recipe_hash  # noqa: E402

TEXT = """
modifiers:
  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}
  - !GMPruningModifier {params: [fc.weight], init_sparsity: 0.1, final_sparsity: 0.8, start_epoch: 0,
                        end_epoch: 2, update_frequency: 1}
"""


def test_identity_ignores_lines_and_names_changes() -> None:
    a = loads(TEXT)
    moved = loads("# a comment\n" + TEXT)
    assert recipe_hash(identity(a)) == recipe_hash(identity(moved))
    changed = loads(TEXT.replace("final_sparsity: 0.8", "final_sparsity: 0.9"))
    assert recipe_changes(identity(a), changed) == ["GMPruningModifier (line 4): final_sparsity was 0.8, now 0.9"]
    removed = loads(TEXT.replace("  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}\n", ""))
    assert "modifier 1 was EpochRangeModifier, now GMPruningModifier" in recipe_changes(identity(a), removed)[0]


def _torch_state(text: str):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(8, 4))
    manager = ScheduledModifierManager.from_yaml(text)
    opt = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    return model, manager.state_dict()


@pytest.mark.parametrize("change", [
    ("final_sparsity: 0.8", "final_sparsity: 0.9", "final_sparsity was 0.8, now 0.9"),
    ("  - !EpochRangeModifier {start_epoch: 0, end_epoch: 4}\n", "", "was EpochRangeModifier, now GMPruningModifier"),
])
def test_torch_refuses_a_changed_recipe(change) -> None:
    torch = pytest.importorskip("torch")
    old, new, said = change
    _, state = _torch_state(TEXT)
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(8, 4))
    manager = ScheduledModifierManager.from_yaml(TEXT.replace(old, new))
    manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    with pytest.raises(RecipeChangedError, match="allow_recipe_change=True") as info:
        manager.load_state_dict(state)
    assert said in str(info.value)
    with pytest.warns(UserWarning, match=said):
        manager.load_state_dict(state, allow_recipe_change=True)
    assert manager.runtime.step_count == 3


def test_same_recipe_resumes_and_old_states_are_compared_by_text() -> None:
    torch = pytest.importorskip("torch")
    _, state = _torch_state(TEXT)
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(8, 4))
    manager = ScheduledModifierManager.from_yaml(TEXT)
    manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    manager.load_state_dict(state)  # the same recipe: no error
    legacy = {k: v for k, v in state.items() if k not in ("modifier_ids", "recipe_hash")}
    other = ScheduledModifierManager.from_yaml(TEXT.replace("end_epoch: 2", "end_epoch: 3"))
    other.modify(model, torch.optim.SGD(model.parameters(), lr=0.1), steps_per_epoch=2)
    with pytest.raises(RecipeChangedError, match="end_epoch was 2, now 3"):
        other.load_state_dict(legacy)


def test_keras_restore_refuses_a_changed_recipe(tmp_path) -> None:
    keras = pytest.importorskip("keras")
    import numpy as np

    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, keras.layers.Dense(4, name="fc")(inputs))

    text = TEXT.replace("fc.weight", "fc/kernel")
    manager = ScheduledModifierManager.from_yaml(text)
    model, optimizer, callbacks = manager.modify(build(), keras.optimizers.SGD(0.1), 2)
    model.compile(optimizer=optimizer, loss="mse")
    path = str(tmp_path / "m.keras")
    model.fit(np.ones((8, 8), "float32"), np.ones((8, 4), "float32"), batch_size=4, epochs=1, verbose=0,
              callbacks=[*callbacks, manager.runtime.checkpoint_callback(path)])
    loaded = keras.saving.load_model(path)
    other = ScheduledModifierManager.from_yaml(text.replace("final_sparsity: 0.8", "final_sparsity: 0.5"))
    other.modify(loaded, loaded.optimizer, 2)
    with pytest.raises(RecipeChangedError, match="final_sparsity was 0.8, now 0.5"):
        other.runtime.restore(path)
    with pytest.warns(UserWarning):
        assert other.runtime.restore(path, allow_recipe_change=True) == 1
