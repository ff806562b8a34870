"""The module classes of a Hugging Face architecture, built on the meta device (no weight
allocated, nothing downloaded, ``trust_remote_code`` never used): what ``lint`` matches
class-name targets against (:func:`recipe_spec.params.checkpoint.module_classes`)."""

from __future__ import annotations

from typing import Any

__all__ = ["module_classes"]


def class_note(reason: str) -> str:
    return f"class-name targets could not be checked: {reason}"


def module_classes(config_dict: dict[str, Any]) -> tuple[dict[str, tuple[str, ...]] | None, str,
                                                         dict[str, tuple[str, ...]]]:
    """``(classes, note, direct_params)`` of the architecture ``config_dict`` describes (see
    :func:`recipe_spec.params.checkpoint.module_classes`)."""
    try:
        import transformers

        import torch
    except Exception:  # pragma: no cover - depends on the environment
        return None, class_note("transformers (with torch) is not installed"), {}
    model_type = config_dict.get("model_type")
    architectures = config_dict.get("architectures") or []
    try:
        from transformers import AutoConfig

        kwargs = {k: v for k, v in config_dict.items() if k != "model_type"}
        config = AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:
        return None, class_note(f"unknown model_type {model_type!r} ({type(exc).__name__})"), {}
    builders: list[Any] = [getattr(transformers, a) for a in architectures
                           if isinstance(a, str) and isinstance(getattr(transformers, a, None), type)]
    builders += [transformers.AutoModelForCausalLM, transformers.AutoModel]
    model = None
    failure = ""
    for builder in builders:
        try:
            with torch.device("meta"):
                if builder.__name__.startswith("Auto"):
                    model = builder.from_config(config)
                else:
                    model = builder(config)
            break
        except Exception as exc:
            failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    if model is None:
        arch = ", ".join(map(str, architectures)) or model_type
        return None, class_note(f"unknown architecture {arch} ({failure})"), {}
    classes: dict[str, tuple[str, ...]] = {}
    direct: dict[str, tuple[str, ...]] = {}
    for name, module in model.named_modules():
        classes[name] = tuple(c.__name__ for c in type(module).__mro__
                              if isinstance(c, type) and issubclass(c, torch.nn.Module))
        own = tuple(k for k, v in module._parameters.items() if v is not None)
        if own:
            direct[name] = own
    return classes, f"classes from {type(model).__name__} built on the meta device", direct
