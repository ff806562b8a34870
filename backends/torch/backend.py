"""The backend object that ``recipe_spec.get_backend("torch")`` returns: what the PyTorch
backend declares and the model operations it supplies (the contract is
:class:`recipe_spec.registry.Backend`). Importing this module does not import torch."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from recipe_spec.params import ParamRecord

from .layout import canonical_axes

__all__ = ["backend", "PyTorchBackend", "CAPABILITIES"]

#: What the PyTorch runtime really does (words of :mod:`recipe_spec.modifiers.spec`).
CAPABILITIES = frozenset({
    "masks", "scores:magnitude", "scores:mfac", "scores:obs", "gradients", "lr", "weight_decay",
    "trainable", "layers", "quantization", "loss", "teacher", "acdc", "scores:movement",
    "oneshot", "scores:sparsegpt", "scores:wanda", "checkpoint:huggingface", "scores:gptq",
    "oneshot:quantize", "transform:smoothquant", "transform:awq", "transform:rotations",
    "transform:online-rotations", "prune:experts", "quantize:autoround",
    "integration:transformers",
    "integration:lightning",
})


class PyTorchBackend:
    """Runs recipes on PyTorch."""

    name = "torch"
    framework = "torch"
    framework_modules = ("torch",)
    capabilities = CAPABILITIES
    model_kind = "a torch.nn.Module"
    model_suffixes = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")
    framework_free_suffixes = (".safetensors",)

    def framework_available(self) -> bool:
        """Whether PyTorch is installed (checked without importing it)."""
        return importlib.util.find_spec(self.framework) is not None

    def owns(self, model: Any) -> bool:
        """Whether ``model`` is a ``torch.nn.Module`` (told from its class names, no import)."""
        if isinstance(model, type):
            return False
        return any(
            cls.__name__ == "Module" and getattr(cls, "__module__", "") == "torch.nn.modules.module"
            for cls in type(model).__mro__
        )

    def unsupported_model(self, model: Any) -> str | None:
        """Why ``model`` looks like a model of this framework that the backend cannot run."""
        return None

    def compile(self, recipe: Any, **options: Any) -> Any:
        """A manager that applies ``recipe`` on PyTorch."""
        if not self.framework_available():
            from recipe_spec.diagnostics.packages import MissingPackageError

            raise MissingPackageError("torch", "the torch backend")
        from .manager import TorchManager

        return TorchManager(recipe, **options)

    def calibration_host(self, model: Any) -> Any:
        """The one-shot calibration host of ``model``
        (:class:`recipe_spec.oneshot.host.CalibrationHost`), a context manager."""
        from .oneshot import TorchCalibrationHost

        return TorchCalibrationHost(model)

    def rates(self, width: int, columns: int) -> Any:
        """This machine's rates with PyTorch's arrays, for the one-shot estimate
        (:func:`recipe_spec.oneshot.rates.measure`)."""
        import torch
        from recipe_spec.oneshot.rates import measure

        from .masks import TORCH_OPS

        return measure(TORCH_OPS, torch.from_numpy, width=width, columns=columns, label="PyTorch")

    def param_records(self, model: Any) -> list[ParamRecord]:
        """The parameters of a PyTorch model (``nn.Module``, DDP/FSDP wrappers unwrapped) as
        :class:`~recipe_spec.params.ParamRecord` values."""
        from .params import param_records

        return param_records(model)

    def records_from_file(self, path: str) -> list[ParamRecord]:
        """Records (names and shapes) of a ``.safetensors`` header (read without torch) or a
        ``.pt``/``.pth``/``.bin``/``.ckpt`` state_dict or checkpoint."""
        if path.lower().endswith(".safetensors"):
            from recipe_spec.params.headers import records_from_safetensors

            return records_from_safetensors(path)
        from .params import records_from_state_dict

        return records_from_state_dict(path)

    def records_from_state_dict(self, path: Any) -> list[ParamRecord]:
        """Records (names and shapes) of a ``.pt``/``.pth`` state_dict file."""
        from .params import records_from_state_dict

        return records_from_state_dict(path)

    def load_model(self, path: str) -> Any:
        """A TorchScript module (``torch.jit.save``); None for a file of weights only (a
        state_dict or safetensors: names and shapes, no model to run)."""
        from .params import is_torchscript_archive, load_model

        if path.lower().endswith(".safetensors") or not is_torchscript_archive(path):
            return None
        return load_model(path)

    def integration(self, name: str) -> Any:
        """The module of a trainer integration (``transformers``, ``lightning``; capability
        ``integration:<name>``) holding ``RecipeCallback``: :mod:`.integrations`. It imports
        its trainer, which raises ``MissingPackageError`` when that is not installed."""
        import importlib

        return importlib.import_module(f"{__package__}.integrations.{name}")

    def module_classes(self, config: dict[str, Any]) -> tuple[Any, str, dict[str, tuple[str, ...]]]:
        """Each module's class names of the architecture ``config`` describes, built on the meta
        device (capability ``checkpoint:huggingface``; :mod:`.meta`)."""
        from .meta import module_classes

        return module_classes(config)

    def load_checkpoint(self, folder: str, quiet: bool = False, precision: str = "auto", stream: bool = True) -> Any:
        """A Hugging Face causal-LM checkpoint folder as a ``transformers`` model in
        ``precision`` (``"auto"``: the checkpoint's own dtype, as llm-compressor loads it;
        capability ``checkpoint:huggingface``). Raises ``ImportError`` without transformers
        and ``ValueError`` with one line saying why transformers cannot load the folder.
        ``quiet``: no progress bars of transformers' own; ``stream``: as :meth:`load_pretrained`."""
        import transformers

        if quiet:
            transformers.utils.logging.disable_progress_bar()
        return self.load_pretrained(folder, precision, stream=stream)

    def load_pretrained(self, path: str, precision: str = "auto", config_name: str | None = None,
                        trust_remote_code: bool = False, stream: bool = True) -> Any:
        """A Hugging Face checkpoint (a folder, or a hub id in the local cache) loaded as
        llm-compressor's ``oneshot(model=path)`` loads it (:mod:`.pretrained`); ``stream``: a
        folder's blocks read one at a time as the run needs them (False: loaded whole, for a
        run that changes a block's modules: expert pruning)."""
        from .pretrained import load_model

        return load_model(path, precision, config_name, trust_remote_code, stream)

    def load_processor(self, source: str, trust_remote_code: bool = False) -> Any:
        """The tokenizer or processor of a checkpoint folder (:mod:`.pretrained`)."""
        from .pretrained import load_processor

        return load_processor(source, trust_remote_code)

    def checkpoint_requirements(self, quantizing: bool) -> list[tuple[str, str]]:
        """The modules :meth:`load_checkpoint` and a one-shot run of the loaded model need, each
        with what needs it: torch and transformers, and compressed-tensors when a modifier
        quantizes (it holds and saves the quantized layers). Asked (without importing them)
        before anything is loaded, so that a missing one is named first."""
        loading = "recipe-spec oneshot (loading a Hugging Face checkpoint)"
        needs = [("torch", loading), ("transformers", loading)]
        if quantizing:
            needs.append(("compressed_tensors", "quantization on PyTorch (compressed-tensors holds and saves the "
                                                "quantized layers)"))
        return needs

    def canonical_axes(self, layer_type: str, ndim: int) -> tuple[int, ...]:
        """PyTorch stores weights in the canonical order: (out, in, spatial...)."""
        return canonical_axes(layer_type, ndim)

    def own_names(self, records: Sequence[ParamRecord], source: str) -> list[ParamRecord]:
        """Another backend's records under their portable (PyTorch-style) names."""
        if source == self.name:
            return list(records)
        return [ParamRecord(r.alias or r.name, r.shape, r.layer_type, r.prunable, None) for r in records]


backend = PyTorchBackend()
