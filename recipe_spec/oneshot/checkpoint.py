"""A one-shot recipe against a Hugging Face checkpoint folder, from its headers alone (no
weight is read, nothing is imported but the standard library): what would stop the run, and
what it will cost.

- :func:`read_model`: the prunable layers and their shapes (safetensors headers), the
  repeated blocks (``model.layers.<i>``: the numbered modules holding the most parameters),
  the decoder-layer class (:func:`recipe_spec.params.architectures.decoder_layer_class`) and
  the hidden size (``config.json``).
- :func:`model_findings`: an N:M ``mask_structure`` needs every target's ``in_features``
  divisible by M (P004, naming the layers); a ``sequential_targets`` in the recipe must name a
  class or a module the model has (P006). :func:`sequential_targets_problem` checks the same
  for the command line's ``--sequential-targets``.

What the run will cost is :mod:`.estimate`'s.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..diagnostics import codes
from ..diagnostics.base import Diagnostic
from ..params.architectures import architecture, decoder_layer_class, hidden_size
from ..params.checkpoint import ModelNames, read_checkpoint
from ..params.headers import read_safetensors_header
from ..recipe.model import Recipe
from .host import ModuleInfo
from .matching import regex_match
from .modifiers import OneShotModifier, select_modules

__all__ = ["CheckpointModel", "read_model", "model_findings", "sequential_targets_problem"]

_NM = re.compile(r"^([0-9]+):([0-9]+)$")
_EMBEDDING = re.compile(r"(embed|^wte$|^wpe$)")
_NUMBERED = re.compile(r"^(.*)\.(\d+)$")


@dataclass(frozen=True)
class CheckpointModel:
    """A checkpoint folder as the one-shot checks see it (see the module docstring).

    ``modules``: :class:`ModuleInfo` of every module, prunable layers with their
    ``(out, in)`` shape, blocks with the decoder-layer class; ``block_params``: the number of
    parameters in each block; ``classes``: every class name known to be in the model (those of
    a model built on the meta device when ``transformers`` could build it)."""

    path: str
    config: dict[str, Any]
    modules: tuple[ModuleInfo, ...]
    blocks: tuple[str, ...]
    block_params: tuple[int, ...]
    decoder_class: str | None
    hidden: int | None
    classes: frozenset[str] = frozenset()
    #: Bytes of the checkpoint's tensors: in all, and in each block (in ``blocks``' order).
    weight_bytes: int = 0
    block_bytes: tuple[int, ...] = ()

    @property
    def architecture(self) -> str:
        return architecture(self.config) or str(self.config.get("model_type") or "model")


def _shapes(names: ModelNames) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for f in names.files:
        for name, info in read_safetensors_header(f, check_data=False).items():
            shapes[name] = tuple(int(d) for d in info["shape"])
    for derived in names.derived_parameters:  # a tied lm_head has the embedding's shape
        tied = next((n for n in shapes if n.endswith("embed_tokens.weight") or n.endswith("wte.weight")), None)
        if tied is not None:
            shapes[derived] = shapes[tied]
    return shapes


def _expert_linears(shapes: dict[str, tuple[int, ...]], hidden: int | None) -> dict[str, tuple[int, int]]:
    """The Linear weights the run makes of transformers' fused experts (``<experts>.gate_up_proj``
    ``[E, 2I, H]`` or transposed ``[E, H, 2I]``, ``<experts>.down_proj`` ``[E, H, I]`` or
    ``[E, I, H]``; ``up_proj`` without a gate): ``<experts>.<e>.gate_proj`` ``(I, H)``, ``up_proj``
    ``(I, H)``, ``down_proj`` ``(H, I)`` for each expert ``e``, as the run names them."""
    out: dict[str, tuple[int, int]] = {}
    if not hidden:
        return out
    for name, shape in shapes.items():
        if not name.endswith(".down_proj") or len(shape) != 3:
            continue
        prefix = name[: -len(".down_proj")]
        first = shapes.get(f"{prefix}.gate_up_proj") or shapes.get(f"{prefix}.up_proj")
        if first is None or len(first) != 3:
            continue
        gated = f"{prefix}.gate_up_proj" in shapes
        experts, transposed = shape[0], first[1] == hidden and first[2] != hidden
        intermediate = (first[2] if transposed else first[1]) // (2 if gated else 1)
        for e in range(experts):
            for proj in (("gate_proj", "up_proj") if gated else ("up_proj",)):
                out[f"{prefix}.{e}.{proj}"] = (intermediate, hidden)
            out[f"{prefix}.{e}.down_proj"] = (hidden, intermediate)
    return out


def _sizes(names: ModelNames) -> dict[str, int]:
    """Bytes of each tensor of the checkpoint (its safetensors headers)."""
    out: dict[str, int] = {}
    for f in names.files:
        for name, info in read_safetensors_header(f, check_data=False).items():
            begin, end = info.get("data_offsets", (0, 0))
            out[name] = int(end) - int(begin)
    return out


def _blocks(shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, int]]:
    """The numbered modules under the prefix whose numbered modules hold the most parameters."""
    sizes: dict[str, dict[str, int]] = {}
    for name, shape in shapes.items():
        parts = name.split(".")
        for i in range(len(parts) - 1):
            m = _NUMBERED.match(".".join(parts[: i + 1]))
            if m is not None:
                count = 1
                for d in shape:
                    count *= d
                group = sizes.setdefault(m.group(1), {})
                group[m.group(0)] = group.get(m.group(0), 0) + count
                break
    if not sizes:
        return []
    prefix = max(sizes, key=lambda p: (sum(sizes[p].values()), p))
    return sorted(sizes[prefix].items(), key=lambda kv: int(kv[0].rsplit(".", 1)[1]))


def read_model(path: str | os.PathLike[str], names: ModelNames | None = None) -> CheckpointModel:
    """The checkpoint folder ``path`` (``names``: its :func:`read_checkpoint`, read here when
    not given, without building the architecture). Raises
    :class:`~recipe_spec.params.checkpoint.CheckpointError` or
    :class:`~recipe_spec.params.headers.ModelSpecError` for a folder that cannot be read."""
    names = names if names is not None else read_checkpoint(path, classes=False)
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    shapes = _shapes(names)
    blocks = _blocks(shapes)
    decoder = decoder_layer_class(config)
    known = set(names.classes and {c for cs in names.classes.values() for c in cs} or ())
    root = (architecture(config) or "Module", "Module")
    infos: list[ModuleInfo] = [ModuleInfo("", tuple(names.class_of("") or root), False)]
    block_names = {b for b, _ in blocks}
    for module in names.modules:
        built = names.class_of(module)
        weight = shapes.get(f"{module}.weight")
        leaf = module.rsplit(".", 1)[-1]
        if built is not None:
            prunable = weight is not None and len(weight) == 2 and any(
                c in ("Linear", "Conv1D") for c in built)
            classes = tuple(built)
        else:
            prunable = weight is not None and len(weight) == 2 and not _EMBEDDING.search(leaf)
            classes = ("Linear", "Module") if prunable else (
                (decoder, "Module") if module in block_names and decoder else ("Module",))
        infos.append(ModuleInfo(module, classes, prunable, tuple(weight) if prunable and weight else ()))
    known_modules = set(names.modules)
    for module, shape in _expert_linears(shapes, hidden_size(config)).items():  # split as the run splits them
        if module not in known_modules:
            infos.append(ModuleInfo(module, ("Linear", "Module"), True, shape))
    if decoder is not None:
        known.add(decoder)
    sizes = _sizes(names)
    per_block = tuple(sum(n for k, n in sizes.items() if k.startswith(b + ".")) for b, _ in blocks)
    return CheckpointModel(os.fspath(path), config, tuple(infos), tuple(b for b, _ in blocks),
                           tuple(n for _, n in blocks), decoder, hidden_size(config), frozenset(known),
                           sum(sizes.values()), per_block)


# --------------------------------------------------------------------------- checks


def _m_of(mod: OneShotModifier) -> int:
    if mod.prune_m:
        return mod.prune_m
    match = _NM.match(mod.mask_type)
    return int(match.group(2)) if match else 0


def _listing(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _quoted_pattern(name: str) -> str:
    """A ``re:`` pattern for exactly ``name``, single-quoted for YAML (no escapes there)."""
    return "'re:" + re.escape(name) + "$'"


def sequential_targets_problem(model: CheckpointModel, targets: Sequence[str]) -> str | None:
    """Why ``targets`` (class or module names, ``re:`` patterns) name no block of ``model``,
    or None when each names a class or a module it has (a ``re:`` pattern: matches a module
    name, as the run matches it)."""
    modules = {i.name for i in model.modules}
    classes = set(model.classes) | {c for i in model.modules for c in i.classes if c != "Module"}

    def names_one(target: str) -> bool:
        if target.startswith("re:"):
            return any(regex_match(target, n) for n in modules if n)
        return target in classes or target in modules

    wrong = [t for t in targets if not names_one(t)]
    if not wrong:
        return None
    layer = f"; its decoder layer is {model.decoder_class}" if model.decoder_class else ""
    return (f"sequential_targets {', '.join(repr(t) for t in wrong)}: the {model.architecture} in "
            f"{model.path} has no such class or module{layer}")


def model_findings(recipe: Recipe, mods: Sequence[OneShotModifier], model: CheckpointModel) -> list[Diagnostic]:
    """P004 (an N:M structure that does not divide a target's ``in_features``) and P006 (a
    recipe's ``sequential_targets`` naming no class of the model) for ``mods`` of ``recipe``."""
    out: list[Diagnostic] = []
    for mod in mods:
        size = _m_of(mod)
        if size > 1:
            shapes = {i.name: i.weight_shape for i in model.modules}
            bad = [n for n in select_modules(model.modules, mod) if shapes[n][-1] % size]
            if bad:
                key = "mask_structure"
                written = mod.entry.args.get(key)
                out.append(codes.P004(
                    f"mask_structure '{written}' needs every target's in_features divisible by "
                    f"{size}: {_listing([f'{n} (in {shapes[n][-1]})' for n in bad])} "
                    f"{'is' if len(bad) == 1 else 'are'} not",
                    f"Choose an N:M whose M divides those layers' in_features, or leave them out "
                    f"with ignore: [{', '.join(_quoted_pattern(n) for n in bad[:2])}].",
                    mod.entry.value_span(key)).in_file(recipe.path))
        written = mod.entry.args.get("sequential_targets")
        if written:
            targets = [written] if isinstance(written, str) else [str(t) for t in written]
            problem = sequential_targets_problem(model, targets)
            if problem is not None:
                out.append(codes.P006(
                    problem, f"Write {model.decoder_class}." if model.decoder_class else
                    "Name the class of the model's repeated decoder layer.",
                    mod.entry.value_span("sequential_targets")).in_file(recipe.path))
    return out
