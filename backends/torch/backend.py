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
        from .manager import TorchManager

        return TorchManager(recipe, **options)

    def param_records(self, model: Any) -> list[Any]:
        """The parameters of a PyTorch model (``nn.Module``, DDP/FSDP wrappers unwrapped) as
        :class:`~recipe_spec.params.ParamRecord` values."""
        from .params import param_records

        return param_records(model)

    def records_from_state_dict(self, path: Any) -> list[Any]:
        """Records (names and shapes) of a ``.pt``/``.pth`` state_dict file."""
        from .params import records_from_state_dict

        return records_from_state_dict(path)

    def load_model(self, path: Any) -> Any:
        """A TorchScript module (``torch.jit.save``); plain state_dicts are not models."""
        from .params import load_model

        return load_model(path)


backend = PyTorchBackend()
