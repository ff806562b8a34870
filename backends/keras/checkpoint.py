"""Checkpoints of a Keras run with Keras' own saving: the model with ``model.save`` (a
``.keras`` file) and the recipe state beside it (``filepath + ".recipe.npz"``: the state's
arrays in an ``.npz``, the rest as JSON inside it), and the callback that writes both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import keras

if TYPE_CHECKING:
    from recipe_spec.runtime import RecipeRuntime

__all__ = ["RecipeCheckpoint", "save_recipe_state", "load_recipe_state", "recipe_state_path"]


def recipe_state_path(filepath: Any) -> str:
    """Where the recipe state of the model saved at ``filepath`` lies: ``filepath + ".recipe.npz"``."""
    return f"{filepath}.recipe.npz"


def save_recipe_state(state: Mapping[str, Any], path: Any) -> None:
    """Write a :meth:`~recipe_spec_keras.manager.KerasManager.state_dict` to an ``.npz`` (masks as arrays, the rest as JSON)."""
    masks = state.get("masks", {})
    meta = {k: v for k, v in state.items() if k != "masks"}
    meta["released"] = [list(x) for x in meta.get("released", [])]
    meta["trainable_saved"] = {str(k): v for k, v in meta.get("trainable_saved", {}).items()}
    meta["masks"] = [[name, int(owner), applied] for name, (_, owner, applied) in masks.items()]
    arrays = {f"mask_{i}": np.asarray(mask, dtype=bool) for i, (mask, _, _) in enumerate(masks.values())}
    meta = _arrays_out(meta, arrays)  # e.g. the second-order gradient windows
    from recipe_spec.atomic import replacing

    with replacing(path, suffix=".npz") as tmp:  # a crash never leaves half a state
        np.savez(tmp, meta=np.array(json.dumps(meta)), **arrays)


def load_recipe_state(filepath: Any) -> dict[str, Any]:
    """The recipe state saved next to ``filepath`` (a ``.keras`` file or the ``.recipe.npz``
    itself), ready for :meth:`~recipe_spec_keras.manager.KerasManager.load_state_dict`."""

    path = str(filepath)
    if not path.endswith(".recipe.npz"):
        path = recipe_state_path(path)
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        masks = {
            name: (data[f"mask_{i}"].copy(), owner, applied)
            for i, (name, owner, applied) in enumerate(meta.pop("masks"))
        }
        meta = _arrays_in(meta, data)
    meta["masks"] = masks
    meta["released"] = [tuple(x) for x in meta.get("released", [])]
    meta["trainable_saved"] = {int(k): v for k, v in meta.get("trainable_saved", {}).items()}
    return meta


_ARRAY_KEY = "__npz_array__"


def _arrays_out(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """``value`` with every NumPy array moved into ``arrays`` (a reference left in its place)."""
    if isinstance(value, np.ndarray):
        key = f"array_{len(arrays)}"
        arrays[key] = value
        return {_ARRAY_KEY: key}
    if isinstance(value, Mapping):
        return {str(k): _arrays_out(v, arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_arrays_out(v, arrays) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _arrays_in(value: Any, data: Any) -> Any:
    """The inverse of :func:`_arrays_out`."""
    if isinstance(value, dict):
        if set(value) == {_ARRAY_KEY}:
            return data[value[_ARRAY_KEY]].copy()
        return {k: _arrays_in(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrays_in(v, data) for v in value]
    return value


class RecipeCheckpoint(keras.callbacks.Callback):
    """Saves the model with ``model.save(filepath)`` (a ``.keras`` file: weights, compile
    config and optimizer state) and the recipe state next to it (``filepath + ".recipe.npz"``)
    at the end of every ``save_freq``-th epoch. ``filepath`` may hold ``{epoch}`` (1-based, as
    in ``keras.callbacks.ModelCheckpoint``). Put it after the recipe's callback.

    Resume, in a fresh process::

        model = keras.saving.load_model(path)
        manager = ScheduledModifierManager.from_yaml(recipe)
        model, optimizer, callbacks = manager.modify(model, model.optimizer, steps_per_epoch)
        manager.load_state_dict(load_recipe_state(path))
        model.fit(data, epochs=manager.max_epochs, initial_epoch=manager.runtime.epoch,
                  callbacks=callbacks)

    (``runtime.restore(path)`` does the ``load_state_dict`` line.) The model was compiled when
    saved, so it comes back compiled with its optimizer; do not compile it again, which would
    build a fresh optimizer without the saved momentum and iterations.
    """

    def __init__(self, runtime: RecipeRuntime, filepath: Any, save_freq: Any = "epoch"):
        super().__init__()
        if save_freq == "epoch":
            save_freq = 1
        if not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1:
            raise ValueError(f"save_freq must be 'epoch' or a positive number of epochs, not {save_freq!r}")
        if not str(filepath).endswith(".keras"):
            raise ValueError(f"the checkpoint path must end with .keras (model.save format), not {filepath!r}")
        self.runtime, self.filepath, self.save_freq = runtime, str(filepath), save_freq
        self.saved: list[str] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if (epoch + 1) % self.save_freq:
            return
        path = self.filepath.format(epoch=epoch + 1)
        from recipe_spec.atomic import replacing

        with replacing(path) as tmp:  # the model file appears whole or not at all
            self.model.save(tmp)
        save_recipe_state(self.runtime.state_dict(), recipe_state_path(path))
        self.saved.append(path)
