"""A calibration dataset given by name, loaded as llm-compressor 0.14 loads it
(``transformers/data/*.py``, ``datasets/utils.py``): with ``datasets.load_dataset`` from the
Hugging Face hub or its local cache, or from local files, then each row put through the
name's template (or the caller's ``preprocessing_func``) and its text column named ``text``.
:mod:`.inputs` tokenises the result as it tokenises any text.

- **llm-compressor's names** (:data:`NAMED`): ``open_platypus``, ``ultrachat_200k``
  (``ultrachat``), ``gsm8k``, ``c4``, ``wikitext``, ``cnn_dailymail``, ``evolcodealpaca``,
  ``perfectblend``: each its hub dataset and template, word for word; ``gsm8k`` loads its
  ``main`` configuration unless ``dataset_config_name`` names another (llm-compressor passes
  none, which ``datasets`` refuses). ``ultrachat_200k``'s
  ``train``/``test`` splits read ``train_sft``/``test_sft``; it and ``perfectblend`` format
  conversations with the tokenizer's chat template (llm-compressor's default template when the
  tokenizer has none). ``evolcodealpaca``'s template appends the response when the row has one
  (llm-compressor 0.14 tests ``"output" in text`` and so never appends it). The image and
  audio sets (``flickr``, ``peoples_speech``) are refused: one-shot here calibrates on text.
- **another hub id** (``"org/name"``): ``load_dataset(name, dataset_config_name, split=...,
  **raw_kwargs)``, its ``text_column`` tokenised.
- **local data**: ``dataset="json"`` or ``"csv"`` with ``dataset_path`` (a file, or a folder
  of ``train``/``test``/``val`` files as llm-compressor's ``get_custom_datasets_from_path``
  reads it); or ``dataset`` itself a file (``.json``, ``.jsonl``, ``.csv``, ``.parquet``,
  ``.txt``) or a folder (``Dataset.save_to_disk``'s, or data files).

``splits``: a split string (``"train[:512]"``), a dict whose ``"calibration"`` entry is used
(llm-compressor's deprecated form), or a list whose first entry is used; None loads every
split and calibrates on ``train``. Nothing is downloaded when the machine has no
network: a dataset neither local nor in the ``datasets`` cache is refused with what to do.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..diagnostics.packages import require

__all__ = ["NamedDataset", "NAMED", "is_named", "load_named", "named_input"]

_CHAT = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
         "{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
         "{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
         "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
         "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")
_ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                 "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
                 "{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
_ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
_EVOL = ("Below is an instruction that describes a programming task. Write a program that appropriately "
         "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
_ROLES = {"human": "user", "gpt": "assistant"}
_PROMPT = "prompt"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
_FILES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}


def _platypus(row: Mapping[str, Any], _: Any) -> dict[str, str]:
    if row.get("input", "") != "" and "input" in row:
        prompt = _ALPACA_INPUT.format(instruction=row["instruction"], input=row["input"])
    else:
        prompt = _ALPACA.format(instruction=row["instruction"])
    return {"text": prompt + row["output"] if "output" in row else prompt, _PROMPT: prompt}


def _gsm8k(row: Mapping[str, Any], _: Any) -> dict[str, str]:
    prompt = f"Question: {row['question']}\nAnswer:"
    return {"text": prompt + " " + row["answer"] if "answer" in row else prompt, _PROMPT: prompt}


def _evol(row: Mapping[str, Any], _: Any) -> dict[str, str]:
    prompt = _EVOL.format(instruction=row["instruction"])
    return {"text": prompt + row["output"] if "output" in row else prompt, _PROMPT: prompt}


def _cnn(row: Mapping[str, Any], _: Any) -> dict[str, str]:
    return {"text": f"Article:\n{row['article']}\n\n### Summarization:\n{row['highlights']}\n"}


def _ultrachat(row: Mapping[str, Any], processor: Any) -> dict[str, str]:
    messages = list(row["messages"])
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    return {"text": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)}


def _perfectblend(row: Mapping[str, Any], processor: Any) -> dict[str, str]:
    messages = [{"role": _ROLES.get(m["from"], m["from"]), "content": m["value"]} for m in row["conversations"]]
    return {"text": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)}


@dataclass(frozen=True)
class NamedDataset:
    """One of llm-compressor's registered datasets: the hub dataset it loads, its configuration,
    the column tokenised, its template (``template(row, processor) -> {"text": ...}``) and
    whether it formats conversations with the tokenizer's chat template."""

    hub: str
    text_column: str = "text"
    config: str | None = None
    template: Callable[[Mapping[str, Any], Any], dict[str, str]] | None = None
    chat: bool = False


#: llm-compressor 0.14's registered dataset names (aliases included).
NAMED: dict[str, NamedDataset] = {
    "open_platypus": NamedDataset("garage-bAInd/Open-Platypus", template=_platypus),
    "ultrachat_200k": NamedDataset("HuggingFaceH4/ultrachat_200k", "messages", template=_ultrachat, chat=True),
    "gsm8k": NamedDataset("openai/gsm8k", config="main", template=_gsm8k),
    "c4": NamedDataset("allenai/c4"),
    "wikitext": NamedDataset("Salesforce/wikitext"),
    "cnn_dailymail": NamedDataset("cnn_dailymail", config="3.0.0", template=_cnn),
    "evolcodealpaca": NamedDataset("theblackcat102/evol-codealpaca-v1", template=_evol),
    "perfectblend": NamedDataset("mlabonne/open-perfectblend", "conversations", template=_perfectblend, chat=True),
}
NAMED["ultrachat"] = NAMED["ultrachat_200k"]
_NOT_TEXT = {"flickr": "images", "flickr30k": "images", "peoples_speech": "audio"}


def is_named(dataset: Any) -> bool:
    """Whether ``dataset`` is a name or a path to load (a str or PathLike)."""
    return isinstance(dataset, (str, os.PathLike))


def _split(splits: Any) -> str | None:
    if splits is None or isinstance(splits, str):
        return splits
    if isinstance(splits, Mapping):
        if "calibration" not in splits:
            raise ValueError(f"splits={dict(splits)!r}: a dict of splits needs a 'calibration' entry (the split "
                             "calibrated on); better, pass that split as a string, e.g. splits='train[:512]'")
        if len(splits) > 1:
            warnings.warn(f"splits: only the 'calibration' split is used; ignoring {sorted(set(splits) - {'calibration'})}",
                          stacklevel=4)
        return str(splits["calibration"])
    if isinstance(splits, (list, tuple)):
        return str(splits[0]) if splits else None
    raise TypeError(f"splits must be a split string such as 'train[:512]', not {type(splits).__name__} {splits!r}")


def _local_files(path: str, ext: str) -> dict[str, Any] | str:
    """llm-compressor's ``get_custom_datasets_from_path``: a folder's ``*.ext`` files by name (or
    its sub-folders' files by folder name), ``train``/``val``/``test`` recognised in the names."""
    if os.path.isfile(path):
        return path
    files: dict[str, Any] = {}
    names = os.listdir(path)
    if any(n.endswith(ext) for n in names):
        files = {os.path.splitext(n)[0]: os.path.join(path, n) for n in names if n.endswith(ext)}
    else:
        for root, dirs, _ in os.walk(path):
            for d in dirs:
                found = [os.path.join(root, d, n) for n in os.listdir(os.path.join(root, d)) if n.endswith(ext)]
                if found:
                    files[d] = found
    keys = set(files)
    for key in ("train", "val", "test"):
        matches = [k for k in keys if key in k]
        if len(matches) == 1 and matches[0] != key:
            files[key] = files.pop(matches[0])
    if not files:
        raise ValueError(f"dataset_path={path!r} holds no .{ext} file (nor sub-folders of them)")
    return files


def _load(name: str, config: str | None, split: str | None, path: str | None, raw: Mapping[str, Any]) -> Any:
    require("datasets", "loading a calibration dataset by name")
    import datasets
    kwargs = dict(raw)
    if path is not None:
        if name not in ("json", "csv", "parquet", "text"):
            raise ValueError(f"dataset_path={path!r} goes with dataset='json' or 'csv' (its files' format), not "
                             f"dataset={name!r}")
        if not os.path.exists(path):
            raise ValueError(f"dataset_path={path!r}: no such file or folder")
        kwargs["data_files"] = _local_files(path, name)
    elif os.path.isfile(name):
        builder = _FILES.get(os.path.splitext(name)[1].lower())
        if builder is None:
            raise ValueError(f"dataset={name!r}: a file recipe-spec reads is .json, .jsonl, .csv, .parquet or .txt")
        name, kwargs["data_files"] = builder, name
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_info.json")) \
            and os.path.exists(os.path.join(name, "state.json")):
        loaded = datasets.load_from_disk(name)
        return loaded[split] if split is not None and split in getattr(loaded, "keys", lambda: ())() else loaded
    elif not os.path.isdir(name) and not _HUB_ID.fullmatch(name):
        raise ValueError(f"dataset={name!r} is neither one of llm-compressor's dataset names ({', '.join(sorted(NAMED))}), "
                         "a hub id ('org/name'), nor a local file or folder: pass the calibration samples or text "
                         "itself as a list, with tokenizer=")
    try:
        return datasets.load_dataset(name, config, split=split, **kwargs)
    except (OSError, ValueError, FileNotFoundError, ConnectionError) as exc:
        raise ValueError(
            f"dataset={name!r} cannot be loaded here ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}). "
            "A named dataset loads from the Hugging Face hub or the datasets cache (HF_DATASETS_OFFLINE=1 uses the "
            "cache only); or load it yourself (datasets.load_dataset(...), a list of strings) and pass it as "
            "dataset= with tokenizer=") from None


def load_named(dataset: str | os.PathLike[str], processor: Any, *, dataset_config_name: str | None = None,
               dataset_path: str | None = None, splits: Any = None, raw_kwargs: Mapping[str, Any] | None = None,
               text_column: str = "text", preprocessing_func: Callable[[Any], Any] | None = None,
               ) -> tuple[Any, str, bool]:
    """The dataset ``dataset`` names, loaded; the column :mod:`.inputs` tokenises; and whether
    the rows went through the name's template (``preprocessing_func`` instead when given, as in
    llm-compressor) here, so that :mod:`.inputs` does not apply ``preprocessing_func`` again (see
    the module docstring)."""
    name = os.fspath(dataset)
    if name in _NOT_TEXT:
        raise ValueError(f"dataset={name!r} holds {_NOT_TEXT[name]}: recipe_spec.oneshot calibrates on text "
                         "(tokenised samples, or text with tokenizer=)")
    entry = NAMED.get(name)
    split = _split(splits)
    if entry is None:
        return _train(_load(name, dataset_config_name, split, dataset_path, raw_kwargs or {}), name), text_column, False
    if entry.chat and preprocessing_func is None:
        tokenizer = getattr(processor, "tokenizer", processor)
        if tokenizer is None or not hasattr(processor, "apply_chat_template"):
            raise ValueError(f"dataset={name!r} formats conversations with the tokenizer's chat template: pass "
                             "tokenizer= (a Hugging Face tokenizer)")
        if getattr(tokenizer, "chat_template", None) is None:
            warnings.warn(f"tokenizer.chat_template is not set: using llm-compressor's default chat template for "
                          f"{name}", stacklevel=3)
            tokenizer.chat_template = _CHAT
    if name.startswith("ultrachat") and split in ("train", "test"):
        split += "_sft"
    raw = _train(_load(entry.hub, dataset_config_name or entry.config, split, dataset_path, raw_kwargs or {}), name)
    func = preprocessing_func
    if func is None and entry.template is not None:
        template = entry.template

        def func(row: Mapping[str, Any]) -> dict[str, str]:
            return template(row, processor)

    if func is not None:
        raw = raw.map(func, batched=False, desc="Preprocessing")
    return raw, entry.text_column, True


def _train(loaded: Any, name: str) -> Any:
    """A dataset loaded without a split (every split, a ``DatasetDict``) as its ``train``
    split, llm-compressor's fallback; a single split as it is."""
    if not isinstance(getattr(loaded, "column_names", None), Mapping):
        return loaded
    if "train" not in loaded:
        raise ValueError(f"dataset={name!r} has no 'train' split (splits: {sorted(loaded)}): name the split to "
                         "calibrate on, e.g. splits='validation'")
    return loaded["train"]


def named_input(dataset: Any, processor: Any, text: Any, loading: Mapping[str, Any]) -> tuple[Any, Any]:
    """``dataset`` loaded when it is a name or a path (:func:`load_named`, with llm-compressor's
    loading keywords ``loading``: ``dataset_config_name``, ``dataset_path``, ``splits``,
    ``raw_kwargs``) and its text column named ``text``, with the :class:`~.inputs.TextOptions`
    to tokenise it; other datasets as they are, and a loading keyword beside them refused (it
    would be ignored)."""
    from .inputs import TextOptions

    given = {k: v for k, v in loading.items() if v is not None and v != {}}
    if not is_named(dataset):
        if given:
            raise ValueError(f"{', '.join(sorted(given))} applies to a dataset loaded by name (dataset='open_platypus', "
                             "a hub id or a local file); with a dataset object, select and load it yourself")
        return dataset, text
    loaded, column, done = load_named(dataset, processor, text_column=text.text_column,
                                      preprocessing_func=text.preprocessing_func, **given)
    if column in loaded.column_names and "text" not in loaded.column_names:
        loaded = loaded.rename_column(column, "text")
    return loaded, TextOptions(max_seq_length=text.max_seq_length, pad_to_max_length=text.pad_to_max_length,
                               text_column="text", concatenate_data=text.concatenate_data,
                               preprocessing_func=None if done else text.preprocessing_func,
                               preprocessing_num_workers=text.preprocessing_num_workers)
