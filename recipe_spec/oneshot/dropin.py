"""What ``recipe_spec.oneshot`` does with llm-compressor's keywords before and around the run
(:mod:`.keywords` says which it honours): the model and its tokenizer loaded from a checkpoint
folder, the calibration data read (:mod:`.inputs`), the recipe made of modifier objects
(:mod:`.objects`), a mixture-of-experts model refused where its experts cannot be split, and
``log_dir``'s log file.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator
from typing import Any

from ..registry import backend_with

__all__ = ["load_model", "resolve_processor", "log_to"]

#: The config keys that count a model's experts (Mixtral, Qwen-MoE, DeepSeek...).
def _loader() -> Any:
    return backend_with("checkpoint:huggingface")


def load_model(model: Any, *, config_name: str | None = None, precision: str = "auto",
               trust_remote_code: bool = False, whole: bool = False) -> tuple[Any, str | None]:
    """``model`` and the checkpoint folder (or cached hub id) it was loaded from, None for an
    object: a str or PathLike is loaded as llm-compressor loads it
    (``AutoModelForCausalLM.from_pretrained(path, dtype=precision)``), its blocks streamed
    from the folder unless ``whole``; ``config_name`` and a ``precision`` other than
    ``"auto"`` apply to a path only (ValueError with an object)."""
    if not isinstance(model, (str, os.PathLike)):
        for name, value, default, fix in (
                ("config_name", config_name, None, "load the model with the config you want"),
                ("precision", precision, "auto", "cast the model yourself for another dtype")):
            if value != default:
                raise ValueError(f"{name}={value!r} applies when model= is a checkpoint folder; this model is a "
                                 f"{type(model).__name__} already loaded: leave {name} out ({fix})")
        return model, None
    path = os.fspath(model)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"model={path!r} is a file: pass a Hugging Face checkpoint folder (config.json and weights), "
                         "or the model object (AutoModelForCausalLM.from_pretrained(...))")
    backend = _loader()
    try:
        loaded = backend.load_pretrained(path, precision, config_name, trust_remote_code, stream=not whole)
    except ValueError as exc:
        where = "a checkpoint folder that" if os.path.isdir(path) else (
            "not a folder here, and a hub id that is not in the local cache (nothing is downloaded); it")
        raise ValueError(f"model={path!r}: {where} cannot be loaded: {exc}. Pass a local Hugging Face checkpoint "
                         "folder, or load the model yourself and pass it as model=") from None
    return loaded, path


def resolve_processor(model: Any, folder: str | None, tokenizer: Any, processor: Any,
                      trust_remote_code: bool = False, needed: bool = False) -> Any:
    """The tokenizer or processor of the run, as llm-compressor resolves it: ``tokenizer`` or
    ``processor`` (not both); a str is a folder loaded with ``AutoProcessor``; when neither is
    given, the one in the model's checkpoint folder (``folder``, else the model's
    ``config._name_or_path`` when that is a local folder). None when there is none; then a
    ValueError only when ``needed`` (text to tokenise)."""
    if tokenizer is not None and processor is not None:
        raise ValueError("oneshot() takes tokenizer= or processor=, not both (as llm-compressor)")
    given = processor if processor is not None else tokenizer
    keyword = "processor" if processor is not None else "tokenizer"
    if isinstance(given, (str, os.PathLike)):
        try:
            return _loader().load_processor(os.fspath(given), trust_remote_code)
        except ValueError as exc:
            raise ValueError(f"{keyword}={os.fspath(given)!r}: {exc}. Pass the tokenizer object, or the folder "
                             "holding it") from None
    if given is not None:
        return given
    source = folder or getattr(getattr(model, "config", None), "_name_or_path", None)
    if not source or not os.path.isdir(os.fspath(source)):
        return None
    try:
        return _loader().load_processor(os.fspath(source), trust_remote_code)
    except ValueError as exc:
        if needed:
            raise ValueError(f"the dataset holds text and no tokenizer was given; the one of {source!r} cannot be "
                             f"loaded: {exc}. Pass tokenizer=") from None
        return None


@contextlib.contextmanager
def log_to(log_dir: str | os.PathLike[str] | None) -> Iterator[str | None]:
    """With ``log_dir``: recipe-spec's log records (``recipe_spec.*`` loggers, DEBUG and up) are
    written to ``<log_dir>/oneshot_<date>_<time>.log`` for the duration (its path yielded)."""
    if log_dir is None:
        yield None
        return
    if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir) or "\0" in os.fspath(log_dir):
        raise TypeError(f"log_dir must be the path of a folder for the log file, not {type(log_dir).__name__} "
                        f"{log_dir!r}")
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"log_dir={os.fspath(log_dir)!r}: the folder for the log file cannot be made "
                         f"({exc.strerror or exc}): give a folder that exists or can be created") from None
    path = os.path.join(log_dir, f"oneshot_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}.log")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("recipe_spec")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
