"""Module and parameter names of a Hugging Face checkpoint directory, without its weights.

``recipe-spec lint recipe.yaml --model DIR`` checks a recipe's ``targets``/``ignore`` against
the names of a real model. A checkpoint directory holds ``config.json`` and either
``model.safetensors``, shards listed by ``model.safetensors.index.json`` (``weight_map``), or
several ``*.safetensors`` files. Tensor names come from each file's header only (an 8-byte
little-endian length, then that many bytes of JSON); tensor data is never read, so the time
does not grow with the size of the weights, and a file whose data is truncated gives the same
names.

Module names are the parameter names minus their last component, plus every parent. When
``transformers`` and ``torch`` are installed, :func:`module_classes` builds the architecture
from ``config.json`` on the meta device (no memory is allocated for weights) to learn each
module's class names, which class-name targets (``Linear``, ``LlamaDecoderLayer``) need; the
built model also contributes modules without parameters (``rotary_emb``, ``act_fn``) and the
parameters that tied embeddings leave out of the file (``lm_head.weight``).

Every failure raises :class:`CheckpointError` naming the file and what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..text.frozen import FrozenDict

__all__ = [
    "CheckpointError",
    "ModelNames",
    "MAX_HEADER_BYTES",
    "MAX_SHARDS",
    "module_classes",
    "names_from_parameters",
    "read_checkpoint",
    "read_tensor_names",
]

#: The largest safetensors header read (the format's own limit is 100 MB).
MAX_HEADER_BYTES = 100_000_000
#: The most safetensors files one checkpoint may have.
MAX_SHARDS = 10_000
#: The largest ``config.json`` / index file read.
_MAX_JSON_BYTES = 50_000_000

_CONFIG = "config.json"
_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be read: what was wrong, in which file, what to do."""

    def __init__(self, message: str, path: str | os.PathLike[str], hint: str = "") -> None:
        self.message = message
        self.path = os.fspath(path)
        self.hint = hint[:1].upper() + hint[1:]
        text = f"{self.path}: {message}"
        super().__init__(f"{text}. {self.hint}" if hint else text)


@dataclass(frozen=True)
class ModelNames:
    """The names a recipe's targets can match, read from a checkpoint without its weights.

    ``parameters`` are full parameter names (``model.layers.0.self_attn.q_proj.weight``);
    ``modules`` every module name except the root (which is named ``""``);
    ``module_params`` each module's direct parameter names (``{"...q_proj": ("weight",)}``);
    ``classes`` each module's class names in MRO order, root included, or ``None`` with
    ``classes_note`` saying why they are unknown; ``derived_parameters`` the parameters the
    model has but the files do not (tied embeddings); ``notes`` anything the lint should say.
    """

    path: str
    files: tuple[str, ...]
    parameters: tuple[str, ...]
    modules: tuple[str, ...]
    module_params: FrozenDict = field(default_factory=FrozenDict)
    model_type: str | None = None
    architectures: tuple[str, ...] = ()
    tie_word_embeddings: bool | None = None
    classes: FrozenDict | None = None
    classes_note: str = ""
    derived_parameters: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def class_of(self, module: str) -> tuple[str, ...] | None:
        """Class names of ``module`` (MRO order), or ``None`` when they are unknown."""
        if self.classes is None:
            return None
        return self.classes.get(module)


# --------------------------------------------------------------------------- reading files


def _read_json(path: Path, what: str) -> Any:
    try:
        size = path.stat().st_size
        if size > _MAX_JSON_BYTES:
            raise CheckpointError(
                f"{what} is {size} bytes, over the {_MAX_JSON_BYTES}-byte limit", path,
                "check that this is the checkpoint's own file",
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{what} cannot be read ({exc.strerror or exc})", path,
                              "check the path and its permissions") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{what} is not valid JSON ({exc})", path,
                              "re-save the model with save_pretrained or re-download the file") from None


def read_tensor_names(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Tensor names of one ``.safetensors`` file, in header order, ``__metadata__`` left out.

    Only the 8-byte length and the JSON header are read; the header must fit in the file and
    be at most :data:`MAX_HEADER_BYTES`. Tensor data is neither read nor checked.
    """
    where = Path(path)
    redo = "re-save the model (save_pretrained / safetensors save_file) or re-download the file"
    try:
        with open(where, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"not a safetensors file: {len(head)} bytes, shorter than the 8-byte header length",
                    where, redo)
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"not a safetensors file: the header length says {n} bytes, over the "
                    f"{MAX_HEADER_BYTES}-byte limit", where, redo)
            if n < 2 or n > size - 8:
                raise CheckpointError(
                    f"not a safetensors file: the header length says {n} bytes but the file has "
                    f"{size - 8} after it", where, redo)
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror or exc})", where,
                              "check the path and its permissions") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"not a safetensors file: the header is not JSON ({exc})", where, redo) from None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"not a safetensors file: the header is a JSON {type(header).__name__}, not an object",
            where, redo)
    names = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not name or not isinstance(info, dict):
            raise CheckpointError(f"not a safetensors file: the entry {name!r} is not a tensor", where, redo)
        names.append(name)
    return tuple(names)


def _weight_files(root: Path) -> tuple[list[Path], tuple[str, ...]]:
    """The safetensors files to read, and the tensor names the index promises (if any)."""
    index = root / _INDEX
    if index.is_file():
        data = _read_json(index, "the safetensors index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise CheckpointError("has no `weight_map` object of tensor name -> file name", index,
                                  "re-save the model with save_pretrained")
        shards = sorted(set(weight_map.values()))
        if len(shards) > MAX_SHARDS:
            raise CheckpointError(f"lists {len(shards)} files, over the limit of {MAX_SHARDS}", index,
                                  "check that this is the checkpoint's own index")
        files = []
        for shard in shards:
            candidate = (root / shard).resolve()
            if Path(shard).is_absolute() or root.resolve() not in candidate.parents:
                raise CheckpointError(f"names the file {shard!r} outside the checkpoint directory",
                                      index, "the weight_map must name files in the same directory")
            if not candidate.is_file():
                missing = [s for s in shards if not (root / s).is_file()]
                raise CheckpointError(
                    f"names {len(missing)} missing file(s): {', '.join(missing[:3])}", index,
                    "download every shard listed in weight_map, or delete the stale index")
            files.append(root / shard)
        return files, tuple(weight_map)
    if (root / _SINGLE).is_file():
        return [root / _SINGLE], ()
    files = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if not files:
        raise CheckpointError(
            f"has no {_SINGLE}, {_INDEX} or other *.safetensors file", root,
            "save the model with save_pretrained(dir, safe_serialization=True)")
    if len(files) > MAX_SHARDS:
        raise CheckpointError(f"has {len(files)} safetensors files, over the limit of {MAX_SHARDS}", root,
                              "point --model at one checkpoint directory")
    return files, ()


def names_from_parameters(parameters: list[str] | tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """Module names (every parent of a parameter, the root left out) and direct parameters.

    >>> names_from_parameters(["a.b.weight", "a.b.bias", "c"])
    (('a', 'a.b'), {'a.b': ('weight', 'bias'), '': ('c',)})
    """
    modules: set[str] = set()
    direct: dict[str, list[str]] = {}
    for name in parameters:
        owner, _, leaf = name.rpartition(".")
        direct.setdefault(owner, []).append(leaf)
        parts = owner.split(".") if owner else []
        for i in range(1, len(parts) + 1):
            modules.add(".".join(parts[:i]))
    return tuple(sorted(modules)), {k: tuple(v) for k, v in direct.items()}


# --------------------------------------------------------------------------- classes


def _class_note(reason: str) -> str:
    return f"class-name targets could not be checked: {reason}"


def module_classes(
    path_or_config: str | os.PathLike[str] | dict[str, Any],
) -> tuple[dict[str, tuple[str, ...]] | None, str, dict[str, tuple[str, ...]]]:
    """Each module's class names in MRO order, from the architecture built on the meta device.

    ``path_or_config`` is a checkpoint directory, a ``config.json`` path or the config dict.
    Returns ``(classes, note, direct_params)``: ``classes`` maps every module name (the root is
    ``""``) to its ``torch.nn.Module`` class names, most derived first; ``direct_params`` maps
    each module to its direct parameter names (tied ones included). On any failure
    ``classes`` is ``None``, ``direct_params`` empty and ``note`` is one line saying why.
    No weight is allocated and nothing is downloaded; ``trust_remote_code`` is never used.
    """
    if isinstance(path_or_config, dict):
        config_dict: Any = path_or_config
    else:
        p = Path(path_or_config)
        config_path = p / _CONFIG if p.is_dir() else p
        try:
            config_dict = _read_json(config_path, _CONFIG)
        except CheckpointError as exc:
            return None, _class_note(exc.message), {}
    if not isinstance(config_dict, dict):
        return None, _class_note("config.json is not a JSON object"), {}
    from ..registry import BackendError, backend_with

    try:
        backend = backend_with("checkpoint:huggingface")
    except BackendError:
        return None, _class_note("transformers (with torch) is not installed"), {}
    build = getattr(backend, "module_classes", None)
    if build is None:
        return None, _class_note(f"the {backend.name} backend builds no architecture on the meta device"), {}
    return build(config_dict)


# --------------------------------------------------------------------------- the checkpoint


def _config_facts(config: dict[str, Any]) -> tuple[str | None, tuple[str, ...], bool | None]:
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    arch = config.get("architectures")
    architectures = tuple(a for a in arch if isinstance(a, str)) if isinstance(arch, list) else ()
    tie = config.get("tie_word_embeddings")
    text = config.get("text_config")
    if tie is None and isinstance(text, dict):
        tie = text.get("tie_word_embeddings")
    return model_type, architectures, tie if isinstance(tie, bool) else None


def read_checkpoint(path: str | os.PathLike[str], *, classes: bool = True) -> ModelNames:
    """The names of the checkpoint directory ``path`` (see the module docstring).

    With ``classes=False`` (or without ``transformers``) no architecture is built and
    ``ModelNames.classes`` is ``None``. Tied embeddings: when the built model has a parameter
    the files lack (``lm_head.weight`` shares the embedding's tensor), it is added to
    ``parameters`` and listed in ``derived_parameters``; without a built model, the rule is
    that ``tie_word_embeddings: true`` adds ``lm_head.weight`` when no tensor ends in
    ``lm_head.weight``.
    """
    root = Path(path)
    if not root.exists():
        raise CheckpointError("does not exist", root,
                              "pass a Hugging Face checkpoint directory (config.json plus *.safetensors)")
    if not root.is_dir():
        raise CheckpointError("is not a directory", root,
                              "pass the checkpoint directory that holds config.json and the *.safetensors files")
    config_path = root / _CONFIG
    if not config_path.is_file():
        raise CheckpointError(f"has no {_CONFIG}", root,
                              "pass a Hugging Face checkpoint directory (config.json plus *.safetensors)")
    config = _read_json(config_path, _CONFIG)
    if not isinstance(config, dict):
        raise CheckpointError("is not a JSON object", config_path, "re-save the model with save_pretrained")
    model_type, architectures, tie = _config_facts(config)

    files, promised = _weight_files(root)
    params: dict[str, None] = {}
    for f in files:
        params.update(dict.fromkeys(read_tensor_names(f)))
    notes: list[str] = []
    absent = [n for n in promised if n not in params]
    if absent:
        notes.append(f"{len(absent)} tensor(s) in {_INDEX} are in no shard header, e.g. {absent[0]}")

    class_map: dict[str, tuple[str, ...]] | None = None
    note = _class_note("not requested")
    built_params: dict[str, tuple[str, ...]] = {}
    if classes:
        class_map, note, built_params = module_classes(config)
    derived: list[str] = []
    if class_map is not None:
        for owner, leaves in built_params.items():
            for leaf in leaves:
                full = f"{owner}.{leaf}" if owner else leaf
                if full not in params and full.endswith("lm_head.weight") and tie is not False:
                    derived.append(full)
        unknown = [n for n in params if n.rpartition(".")[0] not in class_map]
        if unknown:
            notes.append(
                f"{len(unknown)} tensor name(s) are not parameters of the built {class_map[''][0]}, "
                f"e.g. {unknown[0]} (transformers may rename checkpoint keys when loading)")
    elif tie and not any(n.endswith("lm_head.weight") for n in params):
        derived.append("lm_head.weight")
    for name in derived:
        params[name] = None
    if derived:
        notes.append(f"tied embeddings: {', '.join(derived)} shares the embedding's tensor and is not in the files")

    parameters = tuple(sorted(params))
    modules, direct = names_from_parameters(parameters)
    if class_map is not None:
        modules = tuple(sorted(set(modules) | {m for m in class_map if m}))
    return ModelNames(
        path=os.fspath(root),
        files=tuple(os.fspath(f) for f in files),
        parameters=parameters,
        modules=modules,
        module_params=FrozenDict(direct),
        model_type=model_type,
        architectures=architectures,
        tie_word_embeddings=tie,
        classes=FrozenDict(class_map) if class_map is not None else None,
        classes_note=note,
        derived_parameters=tuple(derived),
        notes=tuple(notes),
    )
