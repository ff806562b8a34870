"""llm-compressor's modifier classes as plain data: ``GPTQModifier(scheme="W4A16",
targets="Linear", ignore=["lm_head"])`` holds its type name and its keyword arguments, nothing
else, so a script written for llm-compressor builds its recipe unchanged once its imports name
``recipe_spec.modifiers`` (the same module paths: ``recipe_spec.modifiers.quantization``,
``.gptq``, ``.smoothquant``, ``.awq``, ``.obcq``, ``.pruning``, ``.autoround``,
``.logarithmic_equalization``, ``.transform`` and its ``.awq`` / ``.smoothquant`` / ``.quip`` /
``.spinquant``).

An object checks nothing when it is made: :func:`recipe_spec.oneshot` turns the objects into
a stage/group recipe (one stage, as llm-compressor's ``Recipe.from_modifiers``) and checks that
text with the stage/group catalogue's declarations, as ``recipe-spec validate`` checks a YAML
file, so an unknown argument or a modifier the run cannot do is an error located in the
generated text, naming the modifier and the argument (:mod:`recipe_spec.oneshot.objects`).

>>> m = ModifierObject.of("GPTQModifier", scheme="W4A16", ignore=["lm_head"])
>>> m.type, m.args
('GPTQModifier', {'scheme': 'W4A16', 'ignore': ['lm_head']})
>>> GPTQModifier(scheme="W4A16") == m
False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "ModifierObject", "AWQMapping", "QuantizationModifier", "GPTQModifier", "SmoothQuantModifier",
    "LogarithmicEqualizationModifier", "AWQModifier", "AutoRoundModifier", "SpinQuantModifier",
    "QuIPModifier", "SparseGPTModifier", "WandaPruningModifier", "MagnitudePruningModifier",
    "ConstantPruningModifier", "REAPPruningModifier",
]


class ModifierObject:
    """One modifier of llm-compressor's stage/group dialect: its type name (the class name)
    and the keyword arguments it was made with (see the module docstring)."""

    #: The modifier's name in a recipe (``GPTQModifier``); the class name.
    type: ClassVar[str] = ""

    def __init__(self, **kwargs: Any) -> None:
        if not self.type:
            raise TypeError("ModifierObject is the base class: use GPTQModifier(...) & co., "
                            "or ModifierObject.of(name, ...)")
        self.args: dict[str, Any] = dict(kwargs)

    @classmethod
    def of(cls, name: str, **kwargs: Any) -> ModifierObject:
        """An object of modifier ``name`` (a class made on the spot for a name with none here)."""
        known = _CLASSES.get(name)
        if known is None:
            known = type(name, (ModifierObject,), {"type": name, "__module__": __name__})
        return known(**kwargs)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.type}({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModifierObject) and (self.type, self.args) == (other.type, other.args)

    def __hash__(self) -> int:
        return hash((self.type, repr(self.args)))


@dataclass(frozen=True)
class AWQMapping:
    """One AWQ mapping, as llm-compressor's ``AWQMapping``: the layer whose output is smoothed
    and the layers that take it (names or ``re:`` patterns)."""

    smooth_layer: str
    balance_layers: list[str]
    activation_hook_target: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The mapping as a recipe writes it (``activation_hook_target`` only when set)."""
        out: dict[str, Any] = {"smooth_layer": self.smooth_layer, "balance_layers": list(self.balance_layers)}
        if self.activation_hook_target is not None:
            out["activation_hook_target"] = self.activation_hook_target
        return out


def _declare(name: str, doc: str) -> type[ModifierObject]:
    return type(name, (ModifierObject,), {"type": name, "__doc__": doc, "__module__": __name__})


_ONE = "llm-compressor's {0} as plain data; run by recipe_spec.oneshot (docs/modifiers/stage/index.md, {0})."
QuantizationModifier = _declare("QuantizationModifier", _ONE.format("QuantizationModifier"))
GPTQModifier = _declare("GPTQModifier", _ONE.format("GPTQModifier"))
SmoothQuantModifier = _declare("SmoothQuantModifier", _ONE.format("SmoothQuantModifier"))
LogarithmicEqualizationModifier = _declare("LogarithmicEqualizationModifier",
                                           _ONE.format("LogarithmicEqualizationModifier"))
AWQModifier = _declare("AWQModifier", _ONE.format("AWQModifier"))
AutoRoundModifier = _declare("AutoRoundModifier", _ONE.format("AutoRoundModifier"))
SpinQuantModifier = _declare("SpinQuantModifier", _ONE.format("SpinQuantModifier"))
QuIPModifier = _declare("QuIPModifier", _ONE.format("QuIPModifier"))
SparseGPTModifier = _declare("SparseGPTModifier", _ONE.format("SparseGPTModifier"))
WandaPruningModifier = _declare("WandaPruningModifier", _ONE.format("WandaPruningModifier"))
MagnitudePruningModifier = _declare("MagnitudePruningModifier", _ONE.format("MagnitudePruningModifier"))
ConstantPruningModifier = _declare("ConstantPruningModifier", _ONE.format("ConstantPruningModifier"))
REAPPruningModifier = _declare("REAPPruningModifier", _ONE.format("REAPPruningModifier"))

_CLASSES: dict[str, type[ModifierObject]] = {
    c.type: c for c in (
        QuantizationModifier, GPTQModifier, SmoothQuantModifier, LogarithmicEqualizationModifier, AWQModifier,
        AutoRoundModifier, SpinQuantModifier, QuIPModifier, SparseGPTModifier, WandaPruningModifier,
        MagnitudePruningModifier, ConstantPruningModifier, REAPPruningModifier)
}
