"""SparseML's grad sampler form, read once for every backend:
``{"data_loader_builder": f, "loss_function": loss}``. ``f(grad_sampler_kwargs)`` returns an
iterable of ``(forward_args, forward_kwargs, loss_target)`` (or a callable returning one,
called again for each pass); one forward and backward per item is one gradient. The backends
do the forward and backward passes (``recipe_spec_torch.second_order.GradSampler``,
``recipe_spec_keras.second_order.GradSampler``).

>>> spec = {"data_loader_builder": lambda kw: [(["x"], {}, "y")] * kw["n"], "loss_function": max}
>>> builder, loss = sampler_parts(spec)
>>> [item for item in batches(builder, {"n": 2})]
[(['x'], {}, 'y'), (['x'], {}, 'y')]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["sampler_parts", "batches"]


def sampler_parts(spec: Any) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """``(data_loader_builder, loss_function)`` of a grad sampler dict, else ``ValueError``."""
    if not isinstance(spec, Mapping) or not callable(spec.get("data_loader_builder")) or not callable(spec.get("loss_function")):
        raise ValueError(
            "grad_sampler must be a dict with a callable 'data_loader_builder' (called with "
            "grad_sampler_kwargs, returning batches (args, kwargs, target)) and a callable "
            f"'loss_function' (called as loss(model_output, target)); got {spec!r}"
        )
    return spec["data_loader_builder"], spec["loss_function"]


def batches(builder: Callable[[Any], Any], kwargs: Any) -> Iterator[tuple[Any, Mapping[str, Any], Any]]:
    """The ``(args, kwargs, target)`` items of one pass of the loader ``builder`` makes."""
    loader = builder(dict(kwargs) if kwargs else kwargs)
    items = loader() if callable(loader) and not hasattr(loader, "__iter__") else loader
    for item in items:
        try:
            args, kw, target = item
        except (TypeError, ValueError):
            raise ValueError(
                "the grad sampler's data loader must yield (args, kwargs, target) triples, "
                f"got {type(item).__name__}"
            ) from None
        yield args, (kw or {}), target
