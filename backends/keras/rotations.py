"""Rotations of the Keras calibration host (a base of :class:`~.oneshot.KerasCalibrationHost`):
a rotation modifier's work (:class:`recipe_spec.oneshot.shared.rotation.Rotation`) where every
rotation is fused into weights (SpinQuant's R1 and R2: the model computes the same function,
so no layer has to rotate activations while it runs; the online ones, QuIP's and SpinQuant's
R4, need the capability ``transform:online-rotations``, which Keras does not have).

compressed-tensors builds the rotations (a PyTorch library: ``pip install compressed-tensors``),
so the host does the work on a PyTorch twin of the weights that take part, built under the
checkpoint's names (``model.embed_tokens``, ``model.layers.0.input_layernorm``,
``model.layers.0.self_attn.q_proj``, ``lm_head``: the names :mod:`.hub` reads from keras-hub's
conversion tables), each in its Keras variable's dtype and in the checkpoint's layout (a
Linear's ``(out, in)`` weight; an embedding table; a norm's scale), with the model's head width
as its config. The PyTorch host's steps run on it, in the same torch operations (the embeddings
centred and each norm's scale fused into the layers it feeds, in float64; compressed-tensors'
``apply_transform_config``), and every twin weight is written back into its Keras variable:
the same bits as the PyTorch host's run of the same recipe on the same model
(``tests/test_oneshot_quip.py`` compares them).

The twin holds a copy of those weights while the rotations run. Refused, before any weight changes (:meth:`Rotations.check_rotations`): a model whose output
projection is tied to its embeddings (keras-hub cannot untie them in place; SpinQuant unties
them), a norm that does not multiply by its scale alone (Gemma's ``1 + scale``), a layer the
twin cannot hold, and what the PyTorch host refuses.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from .params import assign_array, numpy_value

__all__ = ["Rotations"]

#: keras-hub normalisations that compute ``normalised(x) · scale``, as the Llama norms a
#: rotation's norm fusing is written for (Gemma's ``1 + scale`` is not one).
_SCALE_NORMS = ("LlamaLayerNorm", "MistralLayerNormalization", "MixtralLayerNormalization", "QwenLayerNorm",
                "QwenMoeLayerNorm", "Qwen3LayerNorm", "Qwen3MoeLayerNorm", "Phi3LayerNorm")


def _torch() -> Any:
    try:
        import torch
        from compressed_tensors.transform import apply_transform_config  # noqa: F401 - its presence
    except ImportError:
        raise ValueError("rotations are built by compressed-tensors, a PyTorch library: install it "
                         "(pip install compressed-tensors) to run QuIP or SpinQuant on Keras") from None
    return torch


@functools.lru_cache(maxsize=64)
def _buildable(kind: str, size: int) -> str | None:
    """Why compressed-tensors cannot build a ``kind`` rotation of ``size`` (None: it can), asked
    once per kind and size, not once per layer."""
    from compressed_tensors.transform.utils.hadamard import (
        deterministic_hadamard_matrix,
        random_hadamard_matrix,
    )

    torch = _torch()
    try:
        if kind == "hadamard":
            deterministic_hadamard_matrix(size, torch.float64)
        elif kind == "random-hadamard":
            random_hadamard_matrix(size, torch.float64, gen=torch.Generator())
    except (ValueError, RuntimeError, AssertionError) as exc:
        return str(exc)
    return None


def _to_torch(torch: Any, value: np.ndarray, dtype: str) -> Any:
    """``value`` (any float dtype, exact in float32) as a torch tensor of the Keras dtype ``dtype``."""
    return torch.from_numpy(np.array(value, dtype=np.float32)).to(getattr(torch, str(dtype)))


class Rotations:
    """The host's rotations (see the module docstring)."""

    model: Any
    _layers: dict[str, Any]
    _linear: dict[str, Any]

    def _backbone(self) -> Any:
        return getattr(self.model, "backbone", self.model)

    def _parts(self, rotation: Any) -> Iterator[tuple[str, str, Any]]:
        """``(name, kind, keras object)`` of each module a rotation may touch: the Linear layers
        (``linear``), the token embedding (``embedding``) and the norms (``norm``)."""
        for name, lin in self._linear.items():
            yield name, "linear", lin
        for name, layer in self._layers.items():
            if name in self._linear:
                continue
            classes = {c.__name__ for c in type(layer).__mro__}
            if "Embedding" in classes and getattr(layer, "embeddings", None) is not None:
                yield name, "embedding", layer
            elif "norm" in name.rsplit(".", 1)[-1] and getattr(layer, "scale", None) is not None:
                yield name, "norm", layer

    def check_rotations(self, rotation: Any) -> None:
        """Raise a ValueError naming the layer and the fix for what ``rotation`` cannot do on
        this model (see the module docstring), before any weight changes."""
        _torch()
        embedding = getattr(self._backbone(), "token_embedding", None)
        if rotation.untie and getattr(embedding, "tie_weights", False):
            raise ValueError("this keras-hub model ties its output projection to its token embeddings "
                             "(tie_word_embeddings), which SpinQuant unties and keras-hub cannot untie in place: "
                             "load a checkpoint with untied embeddings, or run this recipe on PyTorch")
        for name, kind, layer in self._parts(rotation):
            if kind == "norm" and type(layer).__name__ not in _SCALE_NORMS:
                raise ValueError(f"{name} is a {type(layer).__name__}, which does not compute normalised(x) * scale "
                                 "as the Llama norms a rotation fuses: run this model's rotations on PyTorch")
        if rotation.head_dim_groups and self._head_dim() is None:
            raise ValueError("SpinQuant's R2 rotates each attention head, and this model has no keras-hub backbone "
                             "to read the head width from (head_dim, or hidden_dim and num_query_heads): leave R2 "
                             "out (rotations: [R1]) or load the model with keras-hub")
        twin, _ = self._twin(rotation, values=False)
        self._steps(twin).check_rotations(rotation)

    def apply_rotations(self, rotation: Any) -> None:
        """Do ``rotation``'s work on the model (see the module docstring)."""
        torch = _torch()
        twin, writers = self._twin(rotation)
        with torch.no_grad():
            self._steps(twin).apply_rotations(rotation)
        for name, write in writers.items():
            write(twin.get_submodule(name).weight.detach().to(torch.float32).numpy())

    # -- the twin ---------------------------------------------------------------------------------
    def _steps(self, twin: Any) -> _TwinSteps:
        return _TwinSteps(twin)

    def _head_dim(self) -> int | None:
        backbone = self._backbone()
        head_dim = getattr(backbone, "head_dim", None)
        if head_dim:
            return int(head_dim)
        hidden, heads = getattr(backbone, "hidden_dim", None), getattr(backbone, "num_query_heads", None)
        return int(hidden) // int(heads) if hidden and heads else None

    def _twin(self, rotation: Any, values: bool = True) -> tuple[Any, dict[str, Any]]:
        """A PyTorch module tree holding the weights of :meth:`_parts` under their names (with
        ``values`` False, their shapes alone, on PyTorch's meta device: what the checks read),
        and for each name the function that writes a twin weight back into the Keras model."""
        torch = _torch()
        root = torch.nn.Module()
        head_dim = self._head_dim()
        root.config = types.SimpleNamespace(head_dim=head_dim) if head_dim else types.SimpleNamespace()
        writers: dict[str, Any] = {}
        for name, kind, part in self._parts(rotation):
            if kind == "linear":
                module = torch.nn.Linear(part.columns, part.rows, bias=False, device="meta")
                variable, shape, read = part.variable, (part.rows, part.columns), part.weight  # (out, in)
                writers[name] = part.set_weight
            else:
                variable = part.embeddings if kind == "embedding" else part.scale
                module = (torch.nn.Embedding(*variable.shape, device="meta") if kind == "embedding"
                          else torch.nn.Module())
                shape, read = tuple(int(d) for d in variable.shape), functools.partial(numpy_value, variable)
                writers[name] = lambda a, v=variable: assign_array(v, a.reshape(v.shape))
            weight = _to_torch(torch, read(), variable.dtype) if values else torch.empty(shape, device="meta")
            module.weight = torch.nn.Parameter(weight, requires_grad=False)
            _place(torch, root, name, module)
        return root, writers


def _place(torch: Any, root: Any, name: str, module: Any) -> None:
    parent = root
    *path, leaf = name.split(".")
    for part in path:
        child = getattr(parent, part, None)
        if child is None:
            child = torch.nn.Module()
            parent.add_module(part, child)
        parent = child
    parent.add_module(leaf, module)



class _TwinSteps:
    """The PyTorch host's rotation steps (``recipe_spec_torch.rotations``), on the twin: the
    same torch operations, so the same bits; its checks, so the same refusals."""

    def __init__(self, twin: Any) -> None:
        self.model = twin

    def _config(self, rotation: Any) -> Any:
        from compressed_tensors.transform import TransformConfig

        try:
            return TransformConfig.model_validate(rotation.transform_config(self.model.config.head_dim
                                                                             if rotation.head_dim_groups else None))
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ValueError(f"compressed-tensors refuses the transform config: {exc}") from None

    def check_rotations(self, rotation: Any) -> None:
        from compressed_tensors.transform.utils.matrix import get_transform_size
        from compressed_tensors.utils import match_modules_set, match_named_modules

        torch = _torch()
        for scheme in self._config(rotation).config_groups.values():
            kind = str(getattr(scheme.type, "value", scheme.type))
            for args in scheme.apply:
                for name, module in match_named_modules(self.model, args.targets, args.ignore):
                    if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                        raise ValueError(f"{name} is not a Linear or Embedding layer: recipe_spec.oneshot rotates "
                                         "those; narrow the targets or add it to ignore")
                    width = get_transform_size(module, args.location, None)
                    size = scheme.head_dim or width
                    if width % size:
                        raise ValueError(f"{name}: the rotation's block of {size} does not divide its width {width}; "
                                         "pick a transform_block_size that divides every rotated width")
                    why = _buildable(kind, size)
                    if why is not None:
                        raise ValueError(f"{name}: compressed-tensors cannot build a {kind} rotation of size {size} "
                                         f"({why}); use transform_type random-matrix, or a transform_block_size it "
                                         "can build (a power of two)")
        for norm, linears in rotation.norms:
            if not any(True for _ in match_modules_set(self.model, (norm, *linears))):
                raise ValueError(f"no {norm} feeding {', '.join(linears)} in this model: the norm fusing knows "
                                 "Llama-style models (input_layernorm, post_attention_layernorm, model.norm)")

    def apply_rotations(self, rotation: Any) -> None:
        from compressed_tensors.transform import apply_transform_config
        from compressed_tensors.utils import match_modules_set, match_named_modules

        torch = _torch()
        wide = torch.float64
        if rotation.center is not None:
            for _, embedding in match_named_modules(self.model, [rotation.center]):
                w = embedding.weight
                w.data = (w.data.to(wide) - w.data.to(wide).mean(dim=-1, keepdim=True)).to(w.dtype)
        for norm_name, linears in rotation.norms:
            for norm, *layers in match_modules_set(self.model, (norm_name, *linears)):
                (norm,) = norm
                for linear in (m for group in layers for m in group):
                    w = linear.weight
                    w.data = (w.data.to(wide) * norm.weight.data.to(wide)).to(w.dtype)
                norm.weight.data = torch.ones_like(norm.weight.data)
        apply_transform_config(self.model, self._config(rotation))
