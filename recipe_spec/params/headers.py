"""Parameter records without a framework: from ``(name, shape)`` pairs (a checkpoint's
tensors) and from a safetensors file's header, read in bounded memory."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from .records import ParamRecord

__all__ = ["ModelSpecError", "records_from_named_shapes", "read_safetensors_header", "records_from_safetensors"]


#: Normalisation buffers found in state_dicts, not parameters.
_BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")
_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
#: The largest safetensors header the format allows (100 MB).
_MAX_HEADER = 100_000_000
_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}


class ModelSpecError(ValueError):
    """A model spec cannot be turned into parameters; the message says why and what to do."""


def _clean_key(key: str) -> str:
    while key.startswith("module."):
        key = key[len("module."):]
    for seg in _WRAPPER_SEGMENTS:
        key = key.replace(seg, "")
    return key


def records_from_named_shapes(items: Iterable[tuple[str, Iterable[int]]]) -> list[ParamRecord]:
    """Records from names and shapes alone (a state_dict, a safetensors header).

    A leading ``module.`` (DDP/DataParallel) and FSDP / checkpoint / ``torch.compile`` wrapper
    segments are removed from the names. Normalisation buffers (``running_mean``,
    ``running_var``, ``num_batches_tracked``) are skipped; other buffers cannot be told from
    parameters and are listed. Without the model there are no layer types (``layer_type`` is
    ""), so prunability is a heuristic: a name ending in ``.weight`` with two or more
    dimensions. That is right for Linear, Conv, ConvTranspose and Embedding weights (2-d and
    more) and for norms and biases (1-d, or not named ``weight``), and wrong for a 2-d+
    ``weight`` of a layer the SPEC does not call prunable (an EmbeddingBag, a custom module).
    Describe the model itself (``package.module:callable``) for exact flags.

    >>> [(r.name, r.prunable) for r in records_from_named_shapes(
    ...     [("module.fc.weight", (4, 8)), ("module.fc.bias", (4,)), ("bn.running_mean", (4,))])]
    [('fc.weight', True), ('fc.bias', False)]
    """
    records = []
    seen: set[str] = set()
    for raw, dims in items:
        name = _clean_key(str(raw))
        if name.rsplit(".", 1)[-1] in _BUFFER_SUFFIXES or name in seen:
            continue
        seen.add(name)
        shape = tuple(int(d) for d in dims)
        records.append(
            ParamRecord(
                name=name,
                shape=shape,
                layer_type="",
                prunable=name.endswith(".weight") and len(shape) >= 2,
                alias=None,
            )
        )
    return records


def _corrupt(where: str, what: str) -> ModelSpecError:
    return ModelSpecError(
        f"{where}: not a valid safetensors file ({what}). Re-save it (safetensors "
        "save_file / save_pretrained) or check that the download finished"
    )


def read_safetensors_header(path: str | os.PathLike[str], check_data: bool = True) -> dict[str, dict[str, Any]]:
    """The tensors of a ``.safetensors`` file: ``{name: {"dtype", "shape", "data_offsets"}}``
    in header order, ``__metadata__`` left out. Only the header is read (8-byte little-endian
    length, then that many bytes of JSON); it is checked against the file's size, and each
    tensor's data range against the data there is unless ``check_data`` is False (a file
    whose data is cut off then gives the same shapes).
    """
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise _corrupt(where, f"only {len(head)} bytes, shorter than the 8-byte header length")
            n = int.from_bytes(head, "little")
            if n < 2 or n > size - 8 or n > _MAX_HEADER:
                raise _corrupt(where, f"the header length says {n} bytes but the file has {size - 8} after it")
            raw = f.read(n)
    except OSError as exc:
        raise ModelSpecError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(where, f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise _corrupt(where, "the header is not a JSON object")
    data_size = size - 8 - n
    tensors: dict[str, dict[str, Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise _corrupt(where, f"the entry of {name!r} is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if (
            not isinstance(dtype, str)
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        ):
            raise _corrupt(where, f"the entry of {name!r} lacks a valid dtype, shape or data_offsets")
        begin, end = offsets
        if not check_data:
            tensors[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
            continue
        if not 0 <= begin <= end <= data_size:
            raise _corrupt(where, f"the data of {name!r} ({begin}..{end}) lies outside the file's {data_size} data bytes")
        numel = 1
        for d in shape:
            numel *= d
        if dtype in _DTYPE_BYTES and end - begin != numel * _DTYPE_BYTES[dtype]:
            raise _corrupt(where, f"{name!r} has {end - begin} bytes but its {dtype} shape {shape} needs {numel * _DTYPE_BYTES[dtype]}")
        tensors[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
    return tensors


def records_from_safetensors(path: str | os.PathLike[str]) -> list[ParamRecord]:
    """Records (names and shapes) of a ``.safetensors`` file; see :func:`records_from_named_shapes`."""
    return records_from_named_shapes((name, t["shape"]) for name, t in read_safetensors_header(path).items())


# --------------------------------------------------------------------------- entry points
