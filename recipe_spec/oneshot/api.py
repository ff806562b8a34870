"""``recipe_spec.oneshot``: llm-compressor's entry point, with its keyword names and defaults.

A script written for llm-compressor switches by changing an import::

    from recipe_spec import oneshot      # was: from llmcompressor import oneshot

    model = oneshot(model=model, recipe="recipe.yaml", dataset=tokenised,
                    num_calibration_samples=512, output_dir="pruned")

Before any weight changes, the recipe passes ``recipe-spec validate``'s checks (every error
located: file:line:col, code, hint) and every modifier is one this backend runs in one shot
(:mod:`.modifiers`); then the calibration data is ordered and batched (:mod:`.calibration`)
and the pipeline runs (:mod:`.pipeline`) over the backend's calibration host.

Where llm-compressor 0.14 differs from what its documentation promises, this follows the
documentation: ``ignore: ["lm_head"]`` excludes lm_head; a one-shot MagnitudePruningModifier
prunes; a recipe without a ``*_stage`` level is refused (not read as empty); a sparsity outside
[0, 1) or one an N:M ``mask_structure`` overrides is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..diagnostics.base import RecipeError
from ..recipe.model import Recipe
from .reports import keep_report, last_report

if TYPE_CHECKING:
    from .pipeline import OneShotReport, Progress

__all__ = ["oneshot", "apply_oneshot", "last_report"]

#: Warnings about what llm-compressor would do otherwise than this run does.
_OTHER_TOOL = frozenset({"C005", "C006", "C007"})


def _role(modifier: str) -> str:
    """The role of the algorithm that runs ``modifier`` (``""``: none runs it)."""
    from .algorithms import BY_MODIFIER

    algorithm = BY_MODIFIER.get(modifier)
    return algorithm.role if algorithm is not None else ""


def _recipe(recipe: Any, recipe_args: Any) -> Recipe:
    if isinstance(recipe, Recipe):
        if recipe_args:
            raise ValueError("recipe_args apply when loading a recipe; pass the path or text instead of a Recipe")
        return recipe
    if isinstance(recipe, (str, os.PathLike)):
        from ..loader import load

        return load(recipe, dict(recipe_args) if recipe_args else None)
    hint = (" (write the mapping as YAML text: yaml.safe_dump(recipe))" if isinstance(recipe, Mapping)
            else " (decode it: recipe.decode())" if isinstance(recipe, bytes) else "")
    raise TypeError(f"recipe must be a path, YAML text, modifier objects or a recipe_spec.Recipe, not "
                    f"{type(recipe).__name__}{hint}")


def oneshot(
    model: Any = None,
    recipe: Any = None,
    dataset: Any = None,
    *,
    tokenizer: Any = None,
    processor: Any = None,
    num_calibration_samples: int = 512,
    shuffle_calibration_samples: bool = True,
    batch_size: int = 1,
    data_collator: str = "truncation",
    pipeline: str | None = "independent",
    sequential_targets: Sequence[str] | str | None = None,
    sequential_offload_device: str | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    overwrite_output_dir: bool = False,
    save_compressed: bool = True,
    recipe_args: Any = None,
    seed: int = 42,
    progress: Progress | bool | None = None,
    preserve_masks: bool = False,
    compat: str | None = None,
    restore_on_error: bool = True,
    config_name: str | None = None,
    precision: str = "auto",
    trust_remote_code_model: bool = False,
    max_seq_length: int | None = None,
    pad_to_max_length: bool = True,
    text_column: str = "text",
    concatenate_data: bool = False,
    preprocessing_func: Any = None,
    preprocessing_num_workers: int | None = None,
    dataset_config_name: str | None = None,
    dataset_path: str | None = None,
    splits: Any = None,
    raw_kwargs: dict[str, Any] | None = None,
    moe_calibrate_all_experts: bool = True,
    distributed_statistics: str = "auto",
    log_dir: str | os.PathLike[str] | None = None,
    **llmcompressor_options: Any,
) -> Any:
    """Compress ``model`` in one pass with the stage/group ``recipe``; returns the model.

    ``model``: a framework model (PyTorch ``nn.Module``, e.g. a Hugging Face
    ``LlamaForCausalLM``). ``recipe``: a path, YAML text or loaded :class:`~recipe_spec.Recipe`
    (``recipe_args``: variable overrides). ``dataset``: tokenised calibration samples (an
    iterable of ``{"input_ids", "attention_mask"}`` dicts, a ``datasets.Dataset`` with an
    ``input_ids`` column, or a DataLoader); ``tokenizer``/``processor`` are not used to read
    it (tokenised data), and are saved into ``output_dir`` beside the model when they are objects
    that save themselves (``save_pretrained``, keras-hub's ``save_to_preset``), as llm-compressor
    saves its processor. The first ``num_calibration_samples`` are fed
    longest first, or in a shuffled order seeded by ``seed`` when
    ``shuffle_calibration_samples``, in batches of ``batch_size`` cut to their shortest sample.
    ``pipeline``: ``independent``, ``sequential`` or ``datafree``; ``sequential_targets``: the
    class names of the blocks run one after another, or their module names or ``re:``
    patterns (default: the model's repeated block; a pattern ``validate`` would refuse in a
    recipe, P005, is a ValueError here).
    ``sequential_offload_device="cpu"`` keeps the cached block inputs in host memory (default
    None: where the model runs; llm-compressor defaults to "cpu"). ``output_dir``: save the
    model (``save_pretrained`` for a Hugging Face model) and ``recipe.yaml`` there; sparse
    models are saved dense, quantized ones compressed (``save_compressed=False`` is refused for
    them: saving fake-quantized dense weights is not implemented). The folder must be new or
    empty unless ``overwrite_output_dir=True`` (recipe-spec's own keyword, ``--force`` on the
    command line), which replaces the whole folder; it is checked (not a file, writable) before
    any weight changes, and written whole or not at all: into a temporary folder beside it that
    takes its name once everything is written (:mod:`recipe_spec.atomic`). ``progress``
    (recipe-spec's own): by default (None) log lines through :mod:`logging` (logger
    ``recipe_spec.oneshot``, INFO; on stderr when logging is not configured) and a bar per pass
    when stderr is a terminal (:class:`~recipe_spec.oneshot.progress.OneShotProgress`);
    ``False`` silences it; a callable ``progress(what, done, total)`` is told when each pass
    starts and after each block (:data:`~recipe_spec.oneshot.pipeline.Progress`). ``preserve_masks``
    (recipe-spec's own, default False as llm-compressor): GPTQ keeps the zeros of the weights
    it quantizes, so a 2:4 pattern an earlier SparseGPT stage left survives (llm-compressor's
    GPTQ error feedback fills them in). ``compat`` (recipe-spec's own, default the newest
    llm-compressor): the release whose rules the recipe is checked by and read as
    (``"llmcompressor==0.10"``); under 0.9 and 0.10 an AWQModifier in their combined form
    (with ``scheme``/``config_groups``) runs as those releases ran it (docs/oneshot.md).
    ``restore_on_error`` (recipe-spec's own, default True): an error during the run puts the
    model back as it was, from a copy of each module kept before its first change (False: no
    copy, and a failed run leaves the model part-compressed).

    Nothing changes before everything that can be checked is: the arguments' types, every
    calibration sample (integer ids inside the vocabulary, masks of the ids' shape, no
    sequence longer than the model's positions), the recipe against the model (targets, N:M
    and group sizes against the widths, ``sequential_targets``, finite weights, no target
    already quantized) and the output folder; each refusal leaves the model as it was.

    llm-compressor 0.14's other keywords (its scripts run unchanged; docs/oneshot.md,
    "llm-compressor's keywords", and :data:`~recipe_spec.oneshot.keywords.LLMCOMPRESSOR_KEYWORDS`
    say what each does here): ``model`` may be a checkpoint folder (str or PathLike), loaded
    with ``AutoModelForCausalLM.from_pretrained(folder, dtype=precision)`` (``config_name``,
    ``trust_remote_code_model``), its tokenizer too when ``tokenizer``/``processor`` is not
    given (a str there is a folder to load it from). ``recipe`` may be llm-compressor's modifier
    objects (``GPTQModifier(scheme="W4A16", targets="Linear", ignore=["lm_head"])`` from
    ``recipe_spec.modifiers.gptq`` & co., or a list of them: :mod:`.objects`), checked as a YAML
    recipe is. ``dataset`` may be text (a list of strings, of ``{text_column: ...}`` dicts, a
    ``datasets.Dataset``): tokenised as llm-compressor does (``max_seq_length``,
    ``pad_to_max_length``, ``concatenate_data``, ``preprocessing_func``,
    ``preprocessing_num_workers``: :mod:`.inputs`); tokenised samples are cut to
    ``max_seq_length``. ``dataset`` may also be a name loaded as llm-compressor loads it
    (``"open_platypus"``, a hub id, a local file; ``dataset_config_name``, ``dataset_path``,
    ``splits``, ``raw_kwargs``: :mod:`.named_data`). Fused experts (transformers'
    mixture-of-experts blocks) run as one Linear per expert and projection, every expert fed
    every token while calibrating (``moe_calibrate_all_experts=False``: its routed tokens).
    ``distributed_statistics``: how several processes (``torchrun``) join their statistics
    (:data:`.distributed.HOW`: ``"auto"``, ``"relay"``, ``"sum"``).
    ``log_dir``: a log file of the run there. Any other
    keyword of llm-compressor (``**llmcompressor_options``) runs only at its default (a
    ValueError names it otherwise) or has nothing to act on here (``tracing_ignore``,
    ``clear_sparse_session``, ``overwrite_cache``, ...); a keyword neither tool takes is a
    TypeError. After the run, ``model.save_pretrained(folder, save_compressed=True)`` writes what
    ``output_dir`` writes (compressed-tensors for a quantized model, ``recipe.yaml``, the
    tokenizer), as llm-compressor's wrapped ``save_pretrained``.

    Quantization (QuantizationModifier, GPTQModifier) leaves compressed-tensors' quantization
    parameters on each quantized module (``weight_scale``, ``weight_zero_point``, static
    ``input_scale`` / ``input_zero_point``) and saves the model with compressed-tensors
    (``config.json`` ``quantization_config``, packed weights); on Keras the quantized layers
    end the run as Keras's own quantized layers and save as ``model.keras`` (see
    docs/oneshot.md). A scheme the backend has no layer for is refused (located B001) before
    any weight changes.

    Raises :class:`~recipe_spec.RecipeError` (every problem located in the recipe) before any
    weight changes when the recipe is invalid or holds a modifier or argument this backend does
    not run in one shot.

    Example (``samples``: a list of ``{"input_ids": [...], "attention_mask": [...]}``)::

        import recipe_spec

        model = recipe_spec.oneshot(model=model, dataset=samples, recipe='''
        sparsity_stage:
          sparsity_modifiers:
            SparseGPTModifier: {sparsity: 0.5, mask_structure: "2:4", ignore: [lm_head]}
        ''', num_calibration_samples=16, shuffle_calibration_samples=False)
        print(recipe_spec.oneshot.last_report().sparsity())
    """
    from ..atomic import check_output_dir
    from ..runtime.preflight import refuse_invalid
    from .calibration import bounded
    from .dropin import load_model, log_to, resolve_processor
    from .inputs import TextOptions, calibration_input, is_text
    from .keywords import check_options, recipe_arguments
    from .named_data import is_named, named_input
    from .objects import is_object_recipe, object_recipe
    from .pipeline import PIPELINES
    from .preflight import check_arguments
    from .progress import default_progress

    if model is None or recipe is None:
        raise TypeError("oneshot() needs model= and recipe=")
    check_arguments(save_compressed=save_compressed, sequential_offload_device=sequential_offload_device, compat=compat,
                    num_calibration_samples=num_calibration_samples, batch_size=batch_size, seed=seed,
                    shuffle_calibration_samples=shuffle_calibration_samples, sequential_targets=sequential_targets,
                    output_dir=output_dir, overwrite_output_dir=overwrite_output_dir, progress=progress,
                    preserve_masks=preserve_masks, restore_on_error=restore_on_error)
    check_options({"data_collator": data_collator, **llmcompressor_options})
    pipeline = "independent" if pipeline is None else pipeline
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline {pipeline!r} is not one of {', '.join(PIPELINES)}")
    text = TextOptions(max_seq_length=max_seq_length, pad_to_max_length=pad_to_max_length, text_column=text_column,
                       concatenate_data=concatenate_data, preprocessing_func=preprocessing_func,
                       preprocessing_num_workers=preprocessing_num_workers)
    arguments = recipe_arguments(recipe_args)
    loaded = object_recipe(recipe, arguments) if is_object_recipe(recipe) else _recipe(recipe, arguments)
    progress = default_progress(progress)
    if not save_compressed and output_dir is not None and any(_role(m.type) == "quantize" for m in loaded.modifiers):
        raise ValueError("save_compressed=False: recipe_spec.oneshot saves quantized models compressed only "
                         "(compressed-tensors' formats); leave save_compressed at True")
    # the recipe's checks before a checkpoint is loaded or text tokenised (apply_oneshot repeats them)
    refuse_invalid(loaded, compat=compat or "llmcompressor", quiet=_OTHER_TOOL)
    if output_dir is not None and isinstance(model, (str, os.PathLike)):  # not the checkpoint read
        check_output_dir(output_dir, overwrite_output_dir, source=model)
    model, folder = load_model(model, config_name=config_name, precision=precision,  # experts pruned: whole
                               trust_remote_code=trust_remote_code_model,
                               whole=any(_role(m.type) == "experts" for m in loaded.modifiers))
    processor = resolve_processor(model, folder, tokenizer, processor, trust_remote_code_model,
                                  needed=is_text(dataset) or is_named(dataset))
    dataset, text = named_input(dataset, processor, text, {
        "dataset_config_name": dataset_config_name, "dataset_path": dataset_path, "splits": splits,
        "raw_kwargs": raw_kwargs})
    dataset = bounded(dataset, num_calibration_samples)  # an endless generator is read to its first samples
    if processor is None and getattr(model, "preprocessor", None) is not None and is_text(dataset, None):
        # text for a model that tokenises its own (a keras-hub task with its preprocessor): the
        # backend's host reads it (:mod:`.calibration_inputs`), at the preprocessor's length
        if max_seq_length is not None or concatenate_data:
            raise ValueError("max_seq_length / concatenate_data apply to text a tokenizer= reads; this model's own "
                             "preprocessor tokenises it at its sequence_length (set preprocessor.sequence_length, "
                             "or pass tokenizer=)")
    else:
        dataset = calibration_input(dataset, processor, text)
    with log_to(log_dir):
        apply_oneshot(
            model, loaded, dataset, num_calibration_samples=num_calibration_samples,
            shuffle_calibration_samples=shuffle_calibration_samples, batch_size=batch_size,
            pipeline=pipeline, sequential_targets=sequential_targets,
            offload=sequential_offload_device is not None and str(sequential_offload_device).startswith("cpu"),
            output_dir=output_dir, overwrite_output_dir=overwrite_output_dir, seed=seed, progress=progress,
            preserve_masks=preserve_masks, compat=compat, processor=processor,
            restore_on_error=restore_on_error, moe_calibrate_all_experts=moe_calibrate_all_experts,
            distributed_statistics=distributed_statistics,
        )
    return model


def apply_oneshot(
    model: Any, recipe: Recipe, dataset: Any = None, *, num_calibration_samples: int = 512,
    shuffle_calibration_samples: bool = True, batch_size: int = 1, pipeline: str = "independent",
    sequential_targets: Sequence[str] | str | None = None, offload: bool = False,
    output_dir: str | os.PathLike[str] | None = None, overwrite_output_dir: bool = False, seed: int = 42,
    progress: Progress | None = None, preserve_masks: bool = False, compat: str | None = None,
    processor: Any = None, restore_on_error: bool = True, moe_calibrate_all_experts: bool = True,
    distributed_statistics: str = "auto",
) -> OneShotReport:
    """:func:`oneshot` for a loaded recipe (``ScheduledModifierManager.apply(model,
    calibration=...)`` and ``recipe-spec oneshot`` call it); returns the run's
    :class:`~.pipeline.OneShotReport`. ``processor``: a tokenizer or processor saved into
    ``output_dir`` with the model (when it has ``save_pretrained`` or ``save_to_preset``).

    Every check that does not need the compression runs before the first module is touched
    (:mod:`.preflight`: the arguments, the data, the recipe against the model, the output
    folder); an error after that (a Hessian that stays singular, Ctrl-C, a full disk) puts
    the model back as it was (:mod:`.journal`; ``restore_on_error=False``: not, and without
    the copy of each changed module that costs) and leaves no folder behind."""
    from ..atomic import check_output_dir, writing
    from ..registry import backend_for
    from ..runtime.preflight import refuse_invalid
    from .algorithms import algorithm_of
    from .calibration import bounded, prepare
    from .distributed import check_distributed_statistics
    from .journal import Journal, journalled
    from .modifiers import resolve
    from .pipeline import run_pipeline
    from .preflight import (
        check_arguments,
        check_chain,
        check_mappings,
        check_model,
        check_rotations,
        refuse_patterns,
        refuse_recipe_patterns,
    )
    from .settings import release_of
    from .shared.quant_plan import check_quant_shapes

    # the semantics run here: llm-compressor's newest (or ``compat``'s); what that tool does
    # otherwise than written (C005-C007) is validate's concern, not this run's
    check_arguments(num_calibration_samples=num_calibration_samples, batch_size=batch_size, seed=seed,
                    shuffle_calibration_samples=shuffle_calibration_samples, pipeline=pipeline,
                    sequential_targets=sequential_targets, offload=offload, output_dir=output_dir,
                    overwrite_output_dir=overwrite_output_dir, progress=progress, preserve_masks=preserve_masks,
                    compat=compat, restore_on_error=restore_on_error, dataset=dataset,
                    moe_calibrate_all_experts=moe_calibrate_all_experts)
    check_distributed_statistics(distributed_statistics)
    release = release_of(compat)
    if output_dir is not None:  # before anything is touched, as the recipe's checks below
        check_output_dir(output_dir, overwrite_output_dir)
    refuse_invalid(recipe, compat=compat or "llmcompressor", quiet=_OTHER_TOOL)
    if isinstance(sequential_targets, str):
        sequential_targets = [sequential_targets]
    refuse_patterns("sequential_targets", sequential_targets or ())
    refuse_recipe_patterns(recipe)
    backend = backend_for(model, "oneshot()")
    mods = resolve(recipe, frozenset(backend.capabilities), backend.name, release)
    if preserve_masks:
        mods = [dataclasses.replace(m, preserve_mask=True) if algorithm_of(m).keeps_masks else m for m in mods]
    make_host = getattr(backend, "calibration_host", None)
    if make_host is None:  # capabilities say "oneshot" without a host: a backend defect
        raise NotImplementedError(f"the {backend.name} backend declares 'oneshot' but has no calibration_host()")
    needs_data = [m for m in mods if m.needs_data]
    if needs_data and dataset is None:
        first = needs_data[0]
        raise RecipeError([_need_data(recipe, first)])
    if needs_data and pipeline == "datafree":
        first = needs_data[0]
        raise ValueError(f"{first.type} ({first.where}) needs calibration data, which the datafree pipeline does "
                         "not feed: use pipeline='independent' (the default) or 'sequential'")
    host = make_host(model)
    if hasattr(host, "calibrate_all_experts"):  # a host that splits experts
        host.calibrate_all_experts = bool(moe_calibrate_all_experts)
    with host:
        # every check that does not need the compression, before the first module is touched
        check_mappings(recipe, host, mods)
        check_model(recipe, mods, host, sequential_targets)
        check_rotations(recipe, host, mods)
        quantizers = [m for m in mods if m.quant is not None]
        problem = getattr(host, "save_problem", lambda quantized: None)(bool(quantizers))
        if output_dir is not None and problem is not None:
            raise RecipeError([_cannot_save(recipe, quantizers[0], problem)])
        if quantizers:
            shape_errors = check_quant_shapes(recipe, quantizers, host.modules())
            if shape_errors:
                raise RecipeError(shape_errors)
        calibration = prepare(host, bounded(dataset, num_calibration_samples),
                              num_calibration_samples=num_calibration_samples,
                              shuffle=shuffle_calibration_samples, batch_size=batch_size,
                              seed=seed) if needs_data else None
        if calibration is not None and calibration.batches and pipeline != "datafree":
            check_chain(host, sequential_targets, calibration.batches[0])
        # what can only fail while the model changes is undone (:mod:`.journal`)
        # (a model streamed from its checkpoint has nothing of the caller's to put back)
        work = journalled(host, restore_on_error and not getattr(host, "streamed", False))
        try:
            if quantizers:
                _attach(recipe, work, quantizers, backend.name, output_dir)
            report = run_pipeline(work, mods, calibration, pipeline=pipeline,
                                  sequential_targets=sequential_targets, offload=offload,
                                  progress=progress, distributed_statistics=distributed_statistics)
            collective = getattr(host, "collective", lambda: None)()
            if output_dir is not None and (collective is None or collective.rank == 0):  # one writer
                text = recipe.source.yaml_text if recipe.source is not None else recipe.to_yaml()
                with writing(output_dir, overwrite_output_dir) as folder:
                    work.save(folder, text)
                    _save_processor(processor, folder)
            if collective is not None:
                collective.barrier()
            # ``model.save_pretrained`` writes the same folder from now on (a host that has it)
            getattr(host, "wrap_save", lambda *_: None)(
                recipe.source.yaml_text if recipe.source else recipe.to_yaml(), processor)
        except BaseException:
            if isinstance(work, Journal):
                work.restore()
            raise
    report.notes += [m.note for m in mods if m.note]
    keep_report(report)
    return report


def _save_processor(processor: Any, folder: str) -> None:
    """Save a tokenizer or processor object into ``folder`` (a name or path is not loaded)."""
    if processor is None or isinstance(processor, (str, os.PathLike)):
        return
    save = getattr(processor, "save_pretrained", None)
    save = save if callable(save) else getattr(processor, "save_to_preset", None)
    if callable(save):
        save(folder)


def _cannot_save(recipe: Recipe, mod: Any, problem: str) -> Any:
    from ..diagnostics import codes

    return codes.B001(f"{mod.type} quantizes and output_dir= is given, but {problem}",
                      "Leave output_dir out and save the model yourself after oneshot() (each quantized module "
                      "holds weight_scale and its scheme), or pass a transformers model.",
                      mod.entry.span).in_file(recipe.path)


def _need_data(recipe: Recipe, mod: Any) -> Any:
    from ..diagnostics import codes

    return codes.B001(f"{mod.type} needs calibration data and no dataset was given",
                      "Pass the calibration samples: dataset= to oneshot(), calibration= to "
                      "ScheduledModifierManager.apply().", mod.entry.span).in_file(recipe.path)


def _attach(recipe: Recipe, host: Any, quantizers: Sequence[Any], backend: str,
            output_dir: str | os.PathLike[str] | None) -> None:
    """Attach every quantization modifier's config to the host, as llm-compressor initialises
    them: every one before any runs. A scheme the host cannot hold (``NotImplementedError``,
    naming the layer), or, with an ``output_dir``, cannot save (the host's optional
    ``save_problem``, asked again once the modifier's schemes are attached), is a
    :class:`RecipeError` located at the modifier's scheme, before any weight changes."""
    from ..diagnostics import codes

    save_problem = getattr(host, "save_problem", None) if output_dir is not None else None
    for m in quantizers:
        assert m.quant is not None
        span = m.entry.key_span("scheme" if "scheme" in m.entry.args else "config_groups")
        try:
            host.attach_quantization(m.quant.config)
        except NotImplementedError as exc:
            raise RecipeError([codes.B001(
                f"{m.type} is not run by recipe_spec.oneshot on the {backend} backend: {exc}",
                f"Pick a scheme the {backend} backend holds (docs/oneshot.md, Quantization), leave the layer out "
                "with `ignore:`, or run this recipe on another backend.", span).in_file(recipe.path)]) from None
        problem = save_problem(True) if save_problem is not None else None
        if problem is not None:
            raise RecipeError([codes.B001(
                f"{m.type} quantizes and output_dir= is given, but {problem}",
                f"Leave output_dir out (the model stays quantized in memory), or pick a scheme the {backend} "
                "backend saves.", span).in_file(recipe.path)])


#: ``recipe_spec.oneshot.last_report()``: the name ``recipe_spec.oneshot`` is this function (the
#: package's modules are imported by their full names: ``from recipe_spec.oneshot import api``).
oneshot.last_report = last_report  # type: ignore[attr-defined]
