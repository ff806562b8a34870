"""Every keyword of llm-compressor 0.14's ``oneshot()`` and what :func:`recipe_spec.oneshot`
does with it (:data:`LLMCOMPRESSOR_KEYWORDS`; docs/oneshot.md, "llm-compressor's keywords").

llm-compressor's ``oneshot(**kwargs)`` takes the fields of its ``ModelArguments``,
``DatasetArguments`` and ``RecipeArguments`` (``HfArgumentParser.parse_dict``) plus
``output_dir`` and ``log_dir``; each is one of:

- ``runs``: honoured, with llm-compressor's meaning (the note says how);
- ``default``: llm-compressor's default value runs (it is what recipe-spec does); any other
  value is refused by name (:func:`check_options`: a ValueError saying what to do);
- ``moot``: accepted with any value, because what it controls does not exist here (the note
  says why: no tracing, no session, no dataset cache) -- the run is the same as with
  llm-compressor's default.

A keyword neither llm-compressor nor recipe-spec takes is a TypeError naming it.

>>> LLMCOMPRESSOR_KEYWORDS["max_seq_length"].status
'runs'
>>> check_options({"streaming": True})
Traceback (most recent call last):
...
ValueError: streaming=True: recipe_spec.oneshot does not run it (llm-compressor 0.14: stream data from a cloud dataset). Leave streaming at its default (False): pass the calibration samples (a list, a datasets.Dataset or a DataLoader).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Keyword", "LLMCOMPRESSOR_KEYWORDS", "OWN_KEYWORDS", "check_options", "recipe_arguments", "table"]

@dataclass(frozen=True)
class Keyword:
    """One keyword of llm-compressor's ``oneshot()``: its default there, ``status`` (``runs``,
    ``default`` or ``moot``, see the module docstring), what it does in llm-compressor
    (``what``) and what recipe-spec does with it or what to do instead (``note``)."""

    name: str
    default: Any
    status: str
    what: str
    note: str


def _k(name: str, default: Any, status: str, what: str, note: str) -> tuple[str, Keyword]:
    return name, Keyword(name, default, status, what, note)


#: llm-compressor 0.14's ``oneshot()`` keywords (its signature and its argument dataclasses).
LLMCOMPRESSOR_KEYWORDS: dict[str, Keyword] = dict((
    # ModelArguments
    _k("model", None, "runs", "the model or a checkpoint to load",
       "a model object, or a local Hugging Face checkpoint folder loaded with "
       "AutoModelForCausalLM.from_pretrained(folder, dtype=precision)"),
    _k("config_name", None, "runs", "the config to load the model with",
       "a config folder used when model= is a folder; refused with a model object"),
    _k("tokenizer", None, "runs", "tokenizer object or folder", "tokenises text calibration data; saved with the model"),
    _k("processor", None, "runs", "processor object or folder", "as tokenizer= (not both)"),
    _k("precision", "auto", "runs", "dtype the checkpoint is loaded in",
       "auto, float16/half, bfloat16, float32/full when model= is a folder; with a model object only 'auto' "
       "(cast it yourself)"),
    _k("tie_word_embeddings", True, "default", "untie the input and output embeddings when False",
       "untie them yourself before oneshot(); a recipe that compresses a tied head or embedding unties it "
       "first, as llm-compressor does"),
    _k("trust_remote_code_model", False, "runs", "allow a checkpoint's own modelling code",
       "passed to transformers when model=, tokenizer= or processor= is a folder"),
    _k("save_compressed", True, "runs", "save quantized models compressed",
       "False with output_dir= is refused for quantized models; model.save_pretrained(dir, save_compressed=False) "
       "after the run writes the dense format"),
    _k("model_revision", "main", "default", "hub revision of the checkpoint",
       "a local folder has no revisions: check out the revision you want"),
    # RecipeArguments
    _k("recipe", None, "runs", "the recipe",
       "a path, YAML text, a recipe_spec.Recipe, a modifier object (recipe_spec.modifiers...) or a list of them"),
    _k("recipe_args", None, "runs", "recipe variables", "a dict or a list of 'name=value' strings"),
    _k("clear_sparse_session", False, "moot", "reset the global compression session",
       "recipe-spec keeps no session between runs"),
    _k("stage", None, "default", "run one stage of the recipe", "put that stage in a recipe of its own"),
    # DatasetArguments
    _k("dataset", None, "runs", "calibration data",
       "tokenised samples, text (list of strings or of {text_column: ...} dicts, a datasets.Dataset, a "
       "DatasetDict's 'train' split), a DataLoader, or a name loaded with datasets.load_dataset as llm-compressor "
       "loads it (its registered names and templates, a hub id, a local file or folder) where the machine can"),
    _k("dataset_config_name", None, "runs", "configuration of a named dataset", "passed to datasets.load_dataset"),
    _k("dataset_path", None, "runs", "a json/csv/dvc dataset to load",
       "with dataset='json' or 'csv': a file, or a folder of train/val/test files"),
    _k("dvc_data_repository", None, "default", "DVC repository of dataset_path", "load the dataset yourself"),
    _k("splits", None, "runs", "split of a named dataset",
       "a split string; a dict's 'calibration' entry or a list's first (llm-compressor's deprecated forms)"),
    _k("batch_size", 1, "runs", "calibration batch size", "batches cut to their shortest sample"),
    _k("data_collator", "truncation", "default", "how a batch is formed", "only 'truncation' runs"),
    _k("num_calibration_samples", 512, "runs", "number of calibration samples", ""),
    _k("shuffle_calibration_samples", True, "runs", "shuffle before selecting", "seeded by seed="),
    _k("max_seq_length", None, "runs", "maximum sequence length",
       "text is tokenised with truncation to it (None: the tokenizer's model_max_length); tokenised samples are "
       "cut to it, as llm-compressor's collator cuts them; a DataLoader's batches are used as they come"),
    _k("pad_to_max_length", True, "runs", "pad text samples to max_seq_length", "as llm-compressor"),
    _k("text_column", "text", "runs", "the column tokenised", "as llm-compressor"),
    _k("concatenate_data", False, "runs", "join samples into max_seq_length chunks", "as llm-compressor"),
    _k("streaming", False, "default", "stream data from a cloud dataset",
       "pass the calibration samples (a list, a datasets.Dataset or a DataLoader)"),
    _k("overwrite_cache", False, "moot", "recompute cached preprocessing", "recipe-spec caches no preprocessing"),
    _k("preprocessing_num_workers", None, "runs", "processes tokenising",
       "datasets.Dataset.map(num_proc=...) for a datasets.Dataset; a list is tokenised in this process (None or 1)"),
    _k("remove_columns", None, "moot", "deprecated in llm-compressor (no effect)",
       "columns the tokenizer does not take are dropped, as llm-compressor does"),
    _k("preprocessing_func", None, "runs", "a function applied to each row before tokenising",
       "a callable; a 'file.py:func' string is refused (import it and pass the function)"),
    _k("raw_kwargs", None, "runs", "keywords for datasets.load_dataset", "passed to datasets.load_dataset"),
    _k("dataloader_num_workers", 0, "default", "DataLoader worker processes", "pass your own DataLoader"),
    _k("min_tokens_per_module", None, "default", "warn when an MoE expert sees few tokens",
       "recipe-spec does not count tokens per expert"),
    _k("moe_calibrate_all_experts", True, "runs", "route every token to every expert while calibrating",
       "as llm-compressor: transformers' fused experts split into one Linear per expert and projection, each fed "
       "every token while statistics are gathered (the router still decides the output); False: its routed "
       "tokens only"),
    _k("pipeline", "independent", "runs", "calibration pipeline",
       "independent, sequential, datafree (None: independent); basic is refused"),
    _k("tracing_ignore", None, "moot", "functions torch.fx tracing skips",
       "recipe-spec runs blocks with hooks and traces nothing"),
    _k("sequential_targets", None, "runs", "blocks of the sequential pipeline", ""),
    _k("sequential_offload_device", "cpu", "runs", "where cached block inputs live",
       "'cpu' keeps them in host memory; recipe-spec's default (None) keeps them where the model runs; another device is refused"),
    _k("sequential_targets_per_subgraph", 1, "default", "blocks per sequential subgraph", "one block at a time"),
    _k("quantization_aware_calibration", True, "moot", "deprecated in llm-compressor (no effect)", ""),
    _k("propagate_error", True, "default", "feed compressed outputs to the next block",
       "recipe-spec always does"),
    _k("use_loss_mask", False, "default", "AWQ loss over masked tokens only", "not implemented"),
    _k("sequential_prefetch", False, "default", "prefetch the next batch in a thread", "not implemented"),
    _k("output_dir", None, "runs", "save the model there", "see docs/oneshot.md, Output"),
    _k("log_dir", None, "runs", "write a log file there", "recipe-spec's log records of the run, oneshot_<time>.log"),
    _k("enable_compile", False, "default", "torch.compile the MSE observer", "not implemented"),
))

#: recipe-spec's own keywords (not llm-compressor's).
OWN_KEYWORDS = ("overwrite_output_dir", "seed", "progress", "preserve_masks", "compat", "distributed_statistics")

def check_options(options: Mapping[str, Any]) -> None:
    """Refuse, by name, each llm-compressor keyword in ``options`` whose value recipe-spec does
    not run (status ``default`` and a value other than the default), and each keyword neither
    tool takes (TypeError)."""
    for name, value in options.items():
        kw = LLMCOMPRESSOR_KEYWORDS.get(name)
        if kw is None:
            raise TypeError(f"oneshot() got the keyword {name!r}, which neither llm-compressor 0.14's oneshot() nor "
                            f"recipe_spec.oneshot takes (docs/oneshot.md, \"llm-compressor's keywords\")")
        if kw.status != "default" or _same(value, kw.default):
            continue
        raise ValueError(f"{name}={value!r}: recipe_spec.oneshot does not run it (llm-compressor 0.14: {kw.what}). "
                         f"Leave {name} at its default ({kw.default!r}): {kw.note}.")


def _same(value: Any, default: Any) -> bool:
    if value is None or (isinstance(value, (list, tuple, dict)) and not value):
        return default is None or not default
    return bool(value == default)


def recipe_arguments(recipe_args: Any) -> dict[str, Any] | None:
    """llm-compressor's ``recipe_args``: a mapping, or a list of ``"name=value"`` strings (the
    value stays a string, as there); None or empty: None."""
    if not recipe_args:
        return None
    if isinstance(recipe_args, Mapping):
        return dict(recipe_args)
    if isinstance(recipe_args, str):
        recipe_args = [recipe_args]
    if not isinstance(recipe_args, (list, tuple)):
        raise TypeError(f"recipe_args must be a mapping of variable names to values or a list of 'name=value' "
                        f"strings, not {type(recipe_args).__name__} {recipe_args!r}")
    out = {}
    for item in recipe_args:
        if not isinstance(item, str) or item.count("=") != 1:
            raise ValueError(f"recipe_args: {item!r} is not 'name=value' (llm-compressor's form), nor is "
                             "recipe_args a dict")
        key, value = item.split("=")
        out[key.strip()] = value
    return out


def table() -> str:
    """:data:`LLMCOMPRESSOR_KEYWORDS` as a Markdown table (docs/oneshot.md holds it)."""
    rows = ["| keyword | llm-compressor default | recipe-spec | what it does there; what recipe-spec does |",
            "| --- | --- | --- | --- |"]
    for kw in LLMCOMPRESSOR_KEYWORDS.values():
        note = f"{kw.what}; {kw.note}" if kw.note else kw.what
        rows.append(f"| `{kw.name}` | `{kw.default!r}` | {kw.status} | {note.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
