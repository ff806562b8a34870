"""PyTorch models and files described as neutral :class:`~recipe_spec.params.ParamRecord` lists.

SPEC, "Parameter targeting": names are those of the *unwrapped* model, so a
DistributedDataParallel / DataParallel / FSDP ``module.`` prefix (and ``torch.compile``'s
``_orig_mod.``) never changes what a recipe matches. A record's name is exactly the name
``named_parameters()`` gives (``conv1.weight``); PyTorch names are the portable names, so
``alias`` is None.

``prunable`` (what ``__ALL_PRUNABLE__`` selects) is the ``weight`` of a Linear, Conv1d/2d/3d,
ConvTranspose1d/2d/3d or Embedding module, of any subclass of those (which covers the QAT
modules of ``torch.ao.nn.qat`` and ``torch.ao.nn.intrinsic.qat``: ``Linear``, ``Conv2d``,
``ConvBn2d``, ``ConvBnReLU2d``, ``LinearReLU``, ``LinearBn1d``, ``Embedding``...), and of
Hugging Face ``transformers`` ``Conv1D`` (GPT-2 style; matched by class name so
``transformers`` is never imported). Grouped and depthwise convolutions are Conv modules and
so prunable; EmbeddingBag, MultiheadAttention's own ``in_proj_weight``, norms, biases and
free-standing ``nn.Parameter`` attributes are not (the SPEC's list, kept to).

PyTorch is imported by the functions here, never at module import time.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

from recipe_spec.params import ParamRecord
from recipe_spec.params.headers import ModelSpecError, records_from_named_shapes

__all__ = [
    "WRAPPERS",
    "PRUNABLE_CLASS_NAMES",
    "unwrap",
    "param_records",
    "records_from_state_dict",
    "records_from_named_shapes",
    "is_torchscript_archive",
    "load_model",
]

#: Wrapper classes (by class name) whose ``.module`` is the real model.
WRAPPERS = frozenset(
    {"DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "FSDP", "DeepSpeedEngine"}
)

#: Class names of the prunable layer types, for modules whose class cannot be checked with
#: isinstance: TorchScript modules (``original_name``) and ``transformers.Conv1D``.
PRUNABLE_CLASS_NAMES = frozenset(
    {
        "Linear", "Conv1d", "Conv2d", "Conv3d",
        "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Embedding",
        "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
        "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
        "NonDynamicallyQuantizableLinear",
        # torch.ao.nn.intrinsic.qat
        "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d",
        "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "LinearBn1d",
        # transformers.pytorch_utils.Conv1D
        "Conv1D",
    }
)


def unwrap(model: Any) -> Any:
    """The model inside any DDP / DataParallel / FSDP (or ``torch.compile``) wrappers.

    A wrapper is anything whose class name is in :data:`WRAPPERS` and that has a ``.module``
    (or a ``torch.compile`` ``OptimizedModule`` with ``._orig_mod``); unwrapping repeats while
    the model is wrapped.
    """
    seen: set[int] = set()
    while id(model) not in seen:
        seen.add(id(model))
        cls = type(model).__name__
        if cls in WRAPPERS and hasattr(model, "module"):
            model = model.module
        elif cls == "OptimizedModule" and hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            break
    return model


def _class_name(module: Any) -> str:
    """The class name of a module; for TorchScript modules, the original Python class name."""
    cls = type(module)
    original = getattr(module, "original_name", None)
    if isinstance(original, str) and cls.__name__ in ("RecursiveScriptModule", "ScriptModule"):
        return original
    # torch.nn.utils.parametrize swaps in a generated subclass named Parametrized<Class>
    if cls.__name__.startswith("Parametrized") and hasattr(module, "parametrizations") and cls.__bases__:
        return cls.__bases__[0].__name__
    return cls.__name__


def _is_prunable_module(module: Any) -> bool:
    import torch.nn as nn

    if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd, nn.Embedding)):
        return True
    cls = type(module)
    if cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers"):
        return True
    # TorchScript modules carry their Python class name only as ``original_name``
    return type(module).__name__ in ("RecursiveScriptModule", "ScriptModule") and _class_name(module) in PRUNABLE_CLASS_NAMES


def _shape(param: Any) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in param.shape)
    except (RuntimeError, ValueError, TypeError):  # an UninitializedParameter (Lazy* modules)
        return ()


def param_records(model: Any) -> list[ParamRecord]:
    """One record per ``named_parameters()`` entry of the unwrapped ``model``, in its order.

    ``layer_type`` is the class name of the module that owns the parameter (``Linear``,
    ``BatchNorm2d``; the Python class name for a TorchScript module). A weight reparametrised
    by ``torch.nn.utils.parametrize`` (``fc.parametrizations.weight.original``) or pruned by
    ``torch.nn.utils.prune`` (``fc.weight_orig``) keeps the prunability of ``fc.weight``.
    """
    model = unwrap(model)
    modules = dict(model.named_modules(remove_duplicate=False))
    records = []
    for name, param in model.named_parameters():
        owner_name, _, local = name.rpartition(".")
        owner = modules.get(owner_name, model)
        layer = owner
        # torch.nn.utils.parametrize: <mod>.parametrizations.<tensor>.original[N]
        parts = name.split(".")
        if len(parts) >= 3 and parts[-3] == "parametrizations" and parts[-1].startswith("original"):
            layer = modules.get(".".join(parts[:-3]), owner)
            local = parts[-2]
        elif local == "weight_orig":  # torch.nn.utils.prune
            local = "weight"
        records.append(
            ParamRecord(
                name=name,
                shape=_shape(param),
                layer_type=_class_name(layer),
                prunable=local == "weight" and _is_prunable_module(layer),
                alias=None,
            )
        )
    return records


def is_torchscript_archive(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip holding TorchScript ``code/``)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any("/code/" in n or n.startswith("code/") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def load_model(path: str | os.PathLike[str]) -> Any:
    """A TorchScript module saved with ``torch.jit.save`` (loaded on the CPU).

    Plain ``.pt`` files holding a state_dict are not models: see :func:`records_from_state_dict`.
    """
    import torch

    return torch.jit.load(os.fspath(path), map_location="cpu")


def _state_dict_of(obj: Any) -> Mapping[str, Any] | None:
    import torch

    def tensors(d: Any) -> bool:
        return isinstance(d, Mapping) and any(isinstance(v, torch.Tensor) for v in d.values())

    if isinstance(obj, Mapping):
        for key in ("state_dict", "model", "model_state_dict", "module"):
            inner = obj.get(key)
            if tensors(inner):
                return inner
        if tensors(obj):
            return obj
    return None


def records_from_state_dict(path: str | os.PathLike[str]) -> list[ParamRecord]:
    """Records of a ``.pt``/``.pth`` file saved with ``torch.save``: a plain state_dict, or a
    checkpoint dict whose ``state_dict`` / ``model`` entry holds one (a leading ``module.`` is
    stripped). Loaded with ``weights_only=True`` on the CPU: nothing in the file is executed.
    Names and shapes only; see :func:`recipe_spec.params.model_spec.records_from_named_shapes` for
    the prunable heuristic (a ``.weight`` of two or more dimensions) and the skipped buffers.
    A TorchScript archive is loaded with ``torch.jit.load`` and described exactly instead.

    Raises ValueError saying what is wrong with the file.
    """
    import torch

    where = os.fspath(path)
    if is_torchscript_archive(where):
        try:
            return param_records(load_model(where))
        except Exception as exc:  # noqa: BLE001 - reported with the file
            raise ModelSpecError(f"{where}: a TorchScript archive that torch.jit.load cannot read ({_first_line(exc)})") from None
    try:
        obj = torch.load(where, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        raise ModelSpecError(
            f"{where}: not a PyTorch state_dict that can be loaded safely (torch.load with "
            f"weights_only=True failed: {_first_line(exc)}). Save the weights with "
            "torch.save(model.state_dict(), path), or describe the model with "
            "--model package.module:callable (a function that builds it)."
        ) from None
    state = _state_dict_of(obj)
    if state is None:
        keys = ", ".join(map(str, list(obj)[:5])) if isinstance(obj, Mapping) else type(obj).__name__
        raise ModelSpecError(
            f"{where}: holds no state_dict (found: {keys or 'an empty dict'}). Expected a mapping of "
            "parameter names to tensors, or a checkpoint dict with a 'state_dict' or 'model' entry."
        )
    return records_from_named_shapes(
        (str(k), tuple(v.shape)) for k, v in state.items() if isinstance(v, torch.Tensor)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
