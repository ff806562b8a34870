"""The backend object that ``recipe_spec.get_backend("torch")`` returns."""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["backend", "PyTorchBackend"]


class PyTorchBackend:
    """Runs recipes on PyTorch."""

    name = "torch"
    framework = "torch"

    def framework_available(self) -> bool:
        """Whether PyTorch is installed (checked without importing it)."""
        return importlib.util.find_spec(self.framework) is not None

    def compile(self, recipe: Any, **options: Any) -> Any:
        """A manager that applies ``recipe`` on PyTorch."""
        if not self.framework_available():
            raise ImportError(
                f"the torch backend needs {self.framework}: pip install 'recipe-spec[torch]'"
            )
        raise NotImplementedError(
            "running recipes on PyTorch is not available in this version of recipe-spec yet"
        )


backend = PyTorchBackend()
