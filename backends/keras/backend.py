"""The backend object that ``recipe_spec.get_backend("keras")`` returns."""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["backend", "KerasBackend"]


class KerasBackend:
    """Runs recipes on Keras 3."""

    name = "keras"
    framework = "keras"

    def framework_available(self) -> bool:
        """Whether Keras 3 is installed (checked without importing it)."""
        return importlib.util.find_spec(self.framework) is not None

    def compile(self, recipe: Any, **options: Any) -> Any:
        """A manager that applies ``recipe`` on Keras 3."""
        if not self.framework_available():
            raise ImportError(
                f"the keras backend needs {self.framework}: pip install 'recipe-spec[keras]'"
            )
        import os

        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        from .manager import KerasManager

        return KerasManager(recipe, **options)

    def param_records(self, model: Any) -> list[Any]:
        """The variables of a Keras 3 model as :class:`~recipe_spec.params.ParamRecord`
        values (path relative to the model, portable alias)."""
        from .params import param_records

        return param_records(model)

    def load_model(self, path: Any) -> Any:
        """A model saved with ``model.save()`` (``.keras``), loaded with ``compile=False``."""
        from .params import load_model

        return load_model(path)


backend = KerasBackend()
