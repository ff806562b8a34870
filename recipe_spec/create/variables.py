"""``RecipeVariables``: the knobs of an automatic recipe (Sparsify 1.6 ``create``).

The fields are Sparsify's, with its types, defaults and help texts (the names are SparseML
``recipe_template``'s keyword arguments). Unlike Sparsify, a dict is merged over the defaults
and checked (an unknown name or a mistyped value is a ``ValueError``), and every field has an
effect on the generated recipe (Sparsify wrote ``sparsity`` into the recipe and never used it).

>>> v = RecipeVariables.merged({"num_epochs": 10, "sparsity": 0.9})
>>> v.num_epochs, v.sparsity, v.final_lr
(10.0, 0.9, 1e-07)
>>> RecipeVariables.merged({"num_epoch": 10})
Traceback (most recent call last):
...
ValueError: Unknown recipe variable 'num_epoch'. Did you mean 'num_epochs'?
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..text.variables import did_you_mean

__all__ = ["RecipeVariables", "GROUPS", "TARGET_MASK_TYPES"]

#: the mask type each deployment target needs (SparseML's ``recipe_template`` check)
TARGET_MASK_TYPES = {"vnni": "block4", "tensorrt": "2:4"}

#: the groups of Sparsify's ``schemas.py``, in order
GROUPS = {
    "Training": ("num_epochs", "init_lr", "final_lr", "target"),
    "Sparsification": ("sparsity", "mask_type", "global_sparsity"),
    "Distillation": ("hardness", "temperature"),
}


def _var(default: Any, help: str, type_name: str) -> Any:
    return field(default=default, metadata={"help": help, "type": type_name})


@dataclass(frozen=True)
class RecipeVariables:
    """The variables of an automatic recipe; ``help`` texts are Sparsify's, with what each
    one changes in the recipe (see ``docs/create.md``)."""

    # Training
    num_epochs: float = _var(20.0, "total epochs", "float")
    init_lr: float = _var(1e-3, "initial LR before scheduling", "float")
    final_lr: float = _var(1e-7, "target LR for end of scheduler", "float")
    target: str | None = _var(None, "target hardware for deployment. ('vnni', 'tensorrt')", "str | None")
    # Sparsification
    sparsity: float = _var(0.8, "target pruning final sparsity", "float")
    mask_type: str = _var("unstructured", "pruning type/structure", "str")
    global_sparsity: bool = _var(True, "global/layerwise sparsity when set to True/False", "bool")
    # Distillation
    hardness: float = _var(0.5, "distillation hardness", "float")
    temperature: float = _var(2.0, "distillation temperature", "float")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            checked = _coerce(f.name, f.metadata["type"], value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        if self.num_epochs <= 0:
            raise ValueError(f"Recipe variable `num_epochs` must be > 0. Received: num_epochs={self.num_epochs}")
        if not 0.0 <= self.sparsity < 1.0:
            raise ValueError(f"Recipe variable `sparsity` must be in [0, 1). Received: sparsity={self.sparsity}")
        if self.init_lr < 0 or self.final_lr < 0:
            raise ValueError(f"Recipe variables `init_lr` and `final_lr` must be >= 0. "
                             f"Received: init_lr={self.init_lr}, final_lr={self.final_lr}")
        if self.target is not None:
            if self.target not in TARGET_MASK_TYPES:
                hint = did_you_mean(self.target, TARGET_MASK_TYPES)
                raise ValueError(f"Recipe variable `target` must be one of {sorted(TARGET_MASK_TYPES)} or None. "
                                 f"Received: target={self.target!r}. {hint}".rstrip(". ") + ("" if hint else "."))
            want = TARGET_MASK_TYPES[self.target]
            if self.mask_type != want:
                raise ValueError(f"The mask type {self.mask_type!r} and target {self.target!r} are incompatible: "
                                 f"set mask_type={want!r} too.")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def merged(cls, overrides: Mapping[str, Any] | RecipeVariables | None = None) -> RecipeVariables:
        """``overrides`` (a dict, a RecipeVariables or None) over the defaults, checked: an
        unknown name or a value of the wrong type is a ``ValueError`` naming it."""
        if overrides is None:
            return cls()
        if isinstance(overrides, RecipeVariables):
            return overrides
        if not isinstance(overrides, Mapping):
            raise ValueError(f"recipe_variables must be a dict or RecipeVariables, not {type(overrides).__name__}")
        known = [f.name for f in fields(cls)]
        for name in overrides:
            if name not in known:
                hint = did_you_mean(str(name), known)
                raise ValueError(f"Unknown recipe variable {name!r}. "
                                 + (hint or f"Known variables: {', '.join(known)}."))
        return cls(**dict(overrides))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def help(cls) -> dict[str, str]:
        """Each variable's help text."""
        return {f.name: f.metadata["help"] for f in fields(cls)}

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """A JSON Schema (2020-12) of the variables: types, defaults, help texts.

        >>> RecipeVariables.schema()["properties"]["sparsity"]
        {'type': 'number', 'default': 0.8, 'description': 'target pruning final sparsity', 'minimum': 0.0, 'exclusiveMaximum': 1.0}
        """
        json_types = {"float": {"type": "number"}, "bool": {"type": "boolean"}, "str": {"type": "string"},
                      "str | None": {"type": ["string", "null"]}}
        props: dict[str, Any] = {}
        for f in fields(cls):
            prop = dict(json_types[f.metadata["type"]])
            prop["default"] = f.default
            prop["description"] = f.metadata["help"]
            props[f.name] = prop
        props["sparsity"].update(minimum=0.0, exclusiveMaximum=1.0)
        props["num_epochs"]["exclusiveMinimum"] = 0.0
        props["init_lr"]["minimum"] = 0.0
        props["final_lr"]["minimum"] = 0.0
        props["target"]["enum"] = [*sorted(TARGET_MASK_TYPES), None]
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "RecipeVariables",
            "description": "Variables of recipe_spec.create (Sparsify Create's RecipeVariables).",
            "type": "object",
            "properties": props,
            "additionalProperties": False,
        }


def _coerce(name: str, type_name: str, value: Any) -> Any:
    """``value`` as the variable's type (an int is a float), or a ``ValueError``."""
    if type_name == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) if not isinstance(value, float) else value
    elif type_name == "bool":
        if isinstance(value, bool):
            return value
    elif type_name == "str":
        if isinstance(value, str):
            return value
    elif type_name == "str | None":
        if value is None or isinstance(value, str):
            return value
    raise ValueError(f"Recipe variable `{name}` must be {type_name}. Received: {name}={value!r} "
                     f"({type(value).__name__})")
