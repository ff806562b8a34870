"""The hand-facing guides that are generated too: ``docs/editors.md`` (editor set-up, with the
list of modifier tags) and ``docs/create.md`` (automatic recipes, with the variables table)."""

from __future__ import annotations

import json

from ..checks.schemas import modifier_names
from .markdown import GENERATED_NOTE, cell, code, page, table, type_of
from .pages import modifier_example


# -- editors ---------------------------------------------------------------------------------
def custom_tags() -> list[str]:
    """The ``yaml.customTags`` entries: one ``"!Name mapping"`` per modifier.

    >>> "!GMPruningModifier mapping" in custom_tags()
    True
    """
    return [f"!{name} mapping" for name in modifier_names()]


def editors_page() -> str:
    """``docs/editors.md``: the combined schema in yaml-language-server (VS Code and others)."""
    settings = {
        "yaml.schemas": {"./recipe.schema.json": ["recipes/**/*.yaml", "recipes/**/*.yml"]},
    }
    example = modifier_example("GMPruningModifier").rstrip("\n")
    lines = [
        "# Recipes in your editor",
        "",
        GENERATED_NOTE.format(source="the modifier schemas"),
        "",
        "recipe-spec ships one JSON Schema for a whole recipe file of each dialect. Editors "
        "built on [yaml-language-server](https://github.com/redhat-developer/yaml-language-server) "
        "(the VS Code YAML extension by Red Hat, Neovim and Helix with `yamlls`, and others) use "
        "it to complete modifier arguments, show their documentation on hover, and underline "
        "unknown keys and wrong types while you type.",
        "",
        "| dialect | whole-recipe schema | one modifier |",
        "|---|---|---|",
        "| SparseML's `!Modifier` lists | `recipe-spec schema` (`--dialect modifier`) | "
        "`recipe-spec schema GMPruningModifier` |",
        "| stage/group (SparseML 1.6+, llm-compressor; [the dialect](stage-dialect.md)) | "
        "`recipe-spec schema --dialect stage` (`core`, its former name, is still read) | "
        "`recipe-spec schema GPTQModifier` |",
        "",
        "The same files are in the repository under `schemas/` (`recipe-modifier.schema.json`, "
        "`recipe-stage.schema.json`, `modifiers/` and `stage/`), and in the installed package "
        "(`recipe_spec.schemas`).",
        "",
        "## 1. Write the schema to a file",
        "",
        "```sh",
        "recipe-spec schema > recipe.schema.json",
        "```",
        "",
        "Commit the file next to your recipes, and write it again after upgrading recipe-spec "
        "(the schema changes when modifiers or fields do).",
        "",
        "## 2. Tell the editor which files are recipes",
        "",
        "Either put a modeline at the top of each recipe (the path is relative to the recipe):",
        "",
        "```yaml",
        "# yaml-language-server: $schema=./recipe.schema.json",
        example,
        "```",
        "",
        "or map the schema to file patterns in the workspace settings (`.vscode/settings.json`; "
        "paths are relative to the workspace root):",
        "",
        "```json",
        json.dumps({"yaml.schemas": settings["yaml.schemas"]}, indent=2),
        "```",
        "",
        "## 3. Declare the modifier tags",
        "",
        "yaml-language-server reports every `!Tag` it does not know as an error. Each modifier "
        "tag marks a mapping of arguments, so add them all to `yaml.customTags` "
        "(this list is generated from the schemas, so it is complete):",
        "",
        "```json",
        json.dumps({"yaml.customTags": custom_tags()}, indent=2),
        "```",
        "",
        "Together, `.vscode/settings.json` holds both keys, `yaml.schemas` and "
        "`yaml.customTags`. For `yamlls` in Neovim, Helix and other editors, the same values "
        "go in the server's settings under `yaml` as `schemas` and `customTags`.",
        "",
        "## What the editor checks, and what it does not",
        "",
        "- A JSON Schema cannot see YAML tags, so the editor checks the arguments of each "
        "`- !Name` item against every modifier and accepts the item when they are valid for "
        "*some* modifier, even if not for the one its tag names. A key that no modifier takes "
        "or a value of the wrong type is still flagged. `recipe-spec validate` reads the tag "
        "and is exact.",
        "- The schema is written in JSON Schema draft 2020-12, while yaml-language-server "
        "documents support for draft 7 and below: keywords newer than draft 7 (such as "
        "`dependentSchemas`, used for arguments that exclude each other) may go unchecked in "
        "the editor. `recipe-spec validate` checks them all.",
        "- Rules beyond a single field (epochs in order, variables, `eval(...)` expressions, "
        "backend support; see [the diagnostic codes](rules/index.md)) are "
        "`recipe-spec validate`'s job; run it before committing (see "
        "[validate](validate.md) for pre-commit and CI).",
        "- Markdown recipe cards (`.md` with YAML front matter) are not checked by the editor.",
        "",
        "Each modifier's fields are documented in [docs/modifiers/](modifiers/index.md).",
        "",
        *_stage_section(),
    ]
    return page(lines)


def _stage_section() -> list[str]:
    """The stage/group part of ``docs/editors.md``."""
    from ..stage_dialect import stage_variants
    from .stage_pages import example_text

    example = example_text(stage_variants("GPTQModifier")[-1]).rstrip("\n")
    settings = {"yaml.schemas": {
        "./recipe.schema.json": ["recipes/training/**/*.yaml"],
        "./stage-recipe.schema.json": ["recipes/llm/**/*.yaml"],
    }}
    return [
        "## Stage/group recipes (llm-compressor)",
        "",
        "The stage/group dialect has no tags, so steps 1 and 2 are all it takes:",
        "",
        "```sh",
        "recipe-spec schema --dialect stage > stage-recipe.schema.json",
        "```",
        "",
        "```yaml",
        "# yaml-language-server: $schema=./stage-recipe.schema.json",
        example,
        "```",
        "",
        "With recipes of both dialects in one workspace, map each schema to its own files:",
        "",
        "```json",
        json.dumps(settings, indent=2),
        "```",
        "",
        "The schema holds every release of SparseML 1.6-1.9 and llm-compressor at once: an "
        "argument that some release takes is accepted, and its hover text says which "
        "releases take it, require it or deprecate it (`Releases: SparseML ≥1.8, llm-compressor "
        "≤0.7.`). An argument no release takes, a misspelt modifier name, a renamed argument "
        "(`percdamp`) and a value of the wrong type are underlined; an `eval(...)` string is "
        "accepted wherever a value goes. What one release alone rejects is "
        "`recipe-spec validate --compat llmcompressor==0.8`'s job (see "
        "[the dialect](stage-dialect.md)).",
    ]


def create_page() -> str:
    """``docs/create.md``: automatic recipes (``recipe_spec.create``), with the variables table
    generated from :meth:`recipe_spec.create.RecipeVariables.schema`."""
    from ..create import LR_FUNCTIONS, LR_STEPS, RecipeVariables
    from ..create.variables import GROUPS

    props = RecipeVariables.schema()["properties"]
    group_of = {name: group for group, names in GROUPS.items() for name in names}
    rows = [(f"`{name}`", type_of(prop), code(json.dumps(prop["default"])), group_of.get(name, ""),
             cell(prop["description"])) for name, prop in props.items()]
    lines = [
        "# Automatic recipes: `recipe_spec.create`",
        "",
        GENERATED_NOTE.format(source="`recipe_spec/create/` (`RecipeVariables.schema()`)"),
        "",
        "`create.initialize` is Sparsify Create's `initialize` (Sparsify 1.6): it writes a recipe "
        "for your model (SparseML 1.8 `recipe_template`'s structure and schedule) and attaches it. "
        "Call it after the model, optimizer and data loader exist, before training:",
        "",
        "```python",
        "from recipe_spec import create",
        "manager, optimizer = create.initialize(model, optimizer, steps_per_epoch=len(loader))",
        "end_epoch = manager.max_epochs  # train this many epochs; remove your own LR scheduler",
        "```",
        "",
        "For PyTorch the second value is the optimizer whose `step()` drives the schedule. For a "
        "Keras model it is what the Keras backend's `modify` returns: `(model, optimizer, callbacks)`. "
        "QAT starts at `min(m.args['start_epoch'] for m in manager.quantization_modifiers)`.",
        "",
        "## Options",
        "",
        *table(["argument", "values"], [
            ("`pruning`", "`True` or `\"gmp\"` (magnitude: GlobalMagnitudePruningModifier, or "
             "MagnitudePruningModifier with `global_sparsity: false`), `False` / `None` (none; `False` with "
             "quantization holds the model's zeros), `\"acdc\"`, `\"mfac\"`, `\"obs\"`, `\"movement\"` "
             "(MovementPruningModifier, always layer-wise), `\"constant\"` / `\"transfer\"` / `\"sparse-transfer\"` "
             "(ConstantPruningModifier)"),
            ("`quantization`", "`True` (default): QuantizationModifier after pruning"),
            ("`lr`", ", ".join(f"`{f}`" for f in LR_FUNCTIONS) + ": LearningRateFunctionModifier from "
             "`init_lr` to `final_lr` over `num_epochs`, set on every step; "
             + ", ".join(f"`{f}`" for f in LR_STEPS) + ": LearningRateModifier (StepLR, MultiStepLR, "
             "ExponentialLR) from `init_lr` down to `final_lr` by a constant factor `lr_gamma`: three "
             "drops every `num_epochs / 4` epochs, two drops at 1/2 and 3/4 of `num_epochs`, or one per "
             "epoch"),
            ("`distillation`", "`True` adds a DistillationModifier; `distillation_teacher` a model, "
             "or None for self-distillation; call `manager.loss_update(loss, student_outputs=out, "
             "student_inputs=x)` before `backward()`"),
            ("`scaler`", "PyTorch: a `torch.amp.GradScaler`; `initialize` then returns it wrapped: "
             "`scaler.step(optimizer)` or `scaler.step()` drives the schedule, a skipped (inf/NaN) step "
             "does not advance it, and the scaler is switched off when quantization starts (autocast: "
             "`enabled=manager.autocast_enabled()`); see [PyTorch](pytorch.md#mixed-precision)"),
            ("`recipe_variables`", "a dict merged over the defaults below (checked: an unknown name or "
             "a wrong type is a `ValueError`), or a `RecipeVariables`"),
            ("`grad_sampler`", "`{\"data_loader_builder\": f, \"loss_function\": loss}`: needed by "
             "`\"mfac\"` and `\"obs\"` (refused before training without it)"),
        ]),
        "",
        "Every option runs on PyTorch and on Keras (`tests/test_create_training.py` trains each on "
        "both); a modifier a backend does not run is refused by `initialize` before training with a "
        "located B001 (or M001) error naming it.",
        "",
        "## Schedule",
        "",
        "With `num_epochs` E: QAT takes Q = 5 epochs if E >= 15, else 2 (none without quantization); "
        "pruning runs from epoch 0 to (E - Q) / 2 (cubic, once per epoch, 0.05 to `sparsity`), "
        "fine-tuning to E - Q, then QAT with observers and batch-norm statistics frozen Q / 2 "
        "later. The defaults (E = 20) prune over 0 to 7.5 and start QAT at 15.",
        "",
        "## Variables",
        "",
        *table(["variable", "type", "default", "group", "help"], rows),
        "",
        "Unlike Sparsify, every variable changes the recipe: `sparsity` is the final sparsity, "
        "`target` (`vnni`, `tensorrt`) needs its `mask_type` (`block4`, `2:4`) and sets the "
        "QuantizationModifier's `tensorrt`.",
        "",
        "## Without a model",
        "",
        "```sh",
        "recipe-spec create --pruning gmp --no-quantization --lr cosine --var sparsity=0.9 -o recipe.yaml",
        "```",
        "",
        "writes the same recipe (`params: __ALL_PRUNABLE__`); `create.recipe_text(...)` returns it in Python.",
    ]
    return page(lines)


