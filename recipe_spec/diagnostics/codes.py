"""The catalogue of diagnostic codes.

Each code has a family letter (``Y`` YAML and files, ``S`` recipe structure, ``V`` variables
and expressions, ``M`` modifier arguments, ``E`` epochs and schedules, ``C`` tool versions of
the stage/group dialect, ``P`` parameter patterns, ``B`` backend support), a default
severity, a one-line title and the text of its documentation page (``docs/rules/CODE.md`` is
generated from this table).
"""

from __future__ import annotations

from .code_table import CODES, Code, code
from .code_table import register as _code

__all__ = ["Code", "CODES", "code"]


# --- Y: files and YAML ---------------------------------------------------------------------
Y001 = _code(
    "Y001", "error", "YAML syntax error",
    "The file is not valid YAML, so nothing in it can be read.",
    "modifiers:\n  - !EpochRangeModifier\n    end_epoch: 10\n   - !GMPruningModifier",
    "Fix the indentation or punctuation at the reported position.",
)
Y002 = _code(
    "Y002", "error", "duplicate key",
    "A key given twice in one mapping is ambiguous; PyYAML silently kept the last value, "
    "so one of the two settings was ignored without a word.",
    "- !GMPruningModifier\n  end_epoch: 10\n  end_epoch: 20",
    "Delete one of the two keys.",
)
Y003 = _code(
    "Y003", "error", "undefined alias",
    "An alias `*name` refers to an anchor `&name` that is not defined before it.",
    "lr_min: *pruning_recovery_end_lr", "Define the anchor first, or write the value.",
)
Y004 = _code(
    "Y004", "error", "document too large, too deep or recursive",
    "Aliases that expand to a huge document (an alias bomb), nesting deeper than any recipe "
    "needs, or an anchor that contains itself would make every tool that reads the recipe "
    "hang or run out of memory.",
    "a: &a [*a]", "Write the values out, or use variables and eval(...).",
)
Y005 = _code(
    "Y005", "error", "tag not allowed",
    "Recipes are data: Python object tags (`!!python/...`) and other executable or "
    "unusual tags are refused so that loading a recipe never runs code.",
    "x: !!python/object/apply:os.system ['rm -rf /']",
    "Remove the tag. Modifier tags (`!GMPruningModifier`) go on items of a modifiers list.",
)
Y006 = _code(
    "Y006", "error", "no YAML front matter",
    "A Markdown recipe card keeps its recipe in a front-matter block between two lines "
    "`---` (or `+++`, which SparseML's loader also accepted); none was found.",
    "# My recipe\nmodifiers: ...", "Put the recipe between a line `---` and a second line `---`.",
)
Y007 = _code(
    "Y007", "error", "file cannot be read as text",
    "The file is not UTF-8 text (binary data, another encoding), is larger than any recipe, "
    "or could not be opened.",
    "", "Check the path; save the file as UTF-8.",
)
Y008 = _code(
    "Y008", "error", "more than one YAML document",
    "A recipe is one YAML document; a second `---` document would be ignored silently.",
    "modifiers: [...]\n---\nmodifiers: [...]", "Merge the documents or split them into files.",
)

# --- S: recipe structure -------------------------------------------------------------------
S001 = _code(
    "S001", "error", "no modifiers",
    "A recipe must list its modifiers under a top-level key whose name contains `modifiers`.",
    "epochs: 10", "Add `modifiers:` with a list of `!Modifier` items.",
)
S002 = _code(
    "S002", "error", "modifier outside a modifiers list",
    "Modifiers are only read from lists under keys whose name contains `modifiers`; one "
    "anywhere else would be silently ignored.",
    "training:\n  - !EpochRangeModifier {start_epoch: 0, end_epoch: 5}",
    "Rename the key to contain `modifiers` (e.g. `training_modifiers`).",
)
S003 = _code(
    "S003", "error", "two recipe dialects in one file",
    "A file is either a `!Modifier` recipe (lists of tagged modifiers) or a stage/group "
    "recipe of SparseML 1.6+ and llm-compressor (`ModifierName: {...}` mappings under "
    "`*_modifiers:` keys); no tool reads a mix, so part of the file would be lost.",
    "sparsity_stage:\n  sparsity_modifiers:\n    - !GMPruningModifier {...}",
    "Write the whole file in one dialect (docs/stage-dialect.md shows the stage/group form).",
)
S004 = _code(
    "S004", "error", "not a modifier",
    "Every item of a modifiers list must be a modifier: `- !Name` with a mapping of "
    "arguments, or the one-key form `- Name: {...}`.",
    "modifiers:\n  - start_epoch: 0", "Add the modifier's tag: `- !EpochRangeModifier`.",
)
S005 = _code(
    "S005", "error", "bad recipe layout",
    "The top level of a recipe must be a mapping (or a list of modifiers); modifier groups "
    "must be lists; a recipe is either staged or not.",
    "modifiers: 5", "Follow the layout in docs/recipe-format.md.",
)
S006 = _code(
    "S006", "error", "modifier arguments must be a mapping",
    "A modifier's arguments are `key: value` pairs.",
    "- !GMPruningModifier [0.1, 0.9]", "Write the arguments as a mapping.",
)

# --- V: variables and expressions ----------------------------------------------------------
V001 = _code(
    "V001", "error", "unknown variable",
    "An `eval(...)` expression uses a name that no variable defines.",
    "end_epoch: eval(num_epoch)", "Define the variable, or fix the spelling.",
)
V002 = _code(
    "V002", "error", "variables form a cycle",
    "Variables that depend on each other in a circle have no value.",
    "a: eval(b)\nb: eval(a)", "Break the cycle by giving one of them a number.",
)
V003 = _code(
    "V003", "error", "expression not allowed",
    "`eval(...)` accepts numbers, variable names, `+ - * / // % **`, unary `+`/`-`, "
    "parentheses and calls of abs, min, max, round, int, float; nothing else, so a recipe "
    "can never run code.",
    "end_epoch: eval(__import__('os'))", "Rewrite the expression with the allowed operations.",
)
V004 = _code(
    "V004", "error", "expression has no finite number value",
    "An expression divided by zero, overflowed, produced a non-finite number, would be too "
    "large to compute, or used a variable that is not a number in arithmetic.",
    "lr: eval(1 / 0)", "Fix the arithmetic or the variable it uses.",
)
V005 = _code(
    "V005", "error", "unknown variable override",
    "A variable given at load time (`--var NAME=VALUE`, `variables=`) must already exist in "
    "the recipe; otherwise the override would silently do nothing.",
    "recipe-spec validate r.yaml --var num_epoch=5", "Use a name the recipe defines.",
)
V006 = _code(
    "V006", "warning", "stage variable reads a global of the same name",
    "Inside a stage's own variable definitions, a name that the stage and the top level both "
    "define resolves to the top-level value (as in SparseML). That is easy to misread.",
    "end_epoch: 100\nstage:\n  end_epoch: 75\n  x: eval(end_epoch)  # 100, not 75\n"
    "  stage_modifiers: []",
    "Rename one of the two variables.",
)
S007 = _code(
    "S007", "error", "one-shot modifier of SparseML's stage/group dialect",
    "LLM one-shot modifiers (SparseGPTModifier, SparseOPTModifier, GPTQModifier, ...) belong "
    "to SparseML's later stage/group dialect and run outside a training loop; a training-time "
    "recipe cannot run them.",
    "modifiers:\n  - !SparseOPTModifier {sparsity: 0.5}",
    "Run the file with a tool of the stage/group dialect (recipe_spec.oneshot, llm-compressor), or remove the one-shot modifier.",
)

# --- M: modifier arguments -----------------------------------------------------------------
M001 = _code(
    "M001", "error", "unknown modifier",
    "No modifier of this name exists, so the step would never run.",
    "- !GMPrunningModifier", "Fix the spelling; `recipe-spec schema` lists every modifier.",
)
M002 = _code(
    "M002", "error", "unknown argument",
    "A key the modifier does not take is a typo or a setting from another tool; SparseML "
    "stopped with a TypeError at run time.",
    "- !GMPruningModifier\n  final_sparsty: 0.9", "Fix the spelling or remove the key.",
)
M003 = _code(
    "M003", "error", "missing required argument",
    "The modifier cannot run without this argument.",
    "- !EpochRangeModifier\n  start_epoch: 0", "Add the argument.",
)
M004 = _code(
    "M004", "error", "wrong type",
    "The value has the wrong type (text where a number is needed, a list where a single "
    "value is expected).",
    "init_lr: '0.1'", "Write the value with the type the field's documentation gives.",
)
M005 = _code(
    "M005", "error", "value out of range",
    "The value is outside the range the modifier accepts.",
    "init_lr: 1.5", "Use a value inside the documented range.",
)
M006 = _code(
    "M006", "error", "value not allowed",
    "The value is not one of the choices the modifier accepts.",
    "inter_func: cubical", "Use one of the listed choices.",
)
M007 = _code(
    "M007", "warning", "deprecated argument",
    "The argument is ignored or no longer has an effect (for example `log_types`, which "
    "SparseML silently dropped).",
    "log_types: __ALL__", "Remove the argument.",
)
M008 = _code(
    "M008", "error", "invalid argument",
    "The argument does not match the modifier's schema.",
    "", "See the modifier's reference page in docs/modifiers/.",
)
M009 = _code(
    "M009", "error", "num_grads mapping without a 0.0 key",
    "A `num_grads` mapping gives the number of gradients per sparsity threshold; it must say "
    "how many to use from sparsity 0.0.",
    "num_grads: {0.5: 128, 0.8: 256}", "Add a `0.0:` entry.",
)
M010 = _code(
    "M010", "error", "N:M mask with a gradual schedule",
    "An N:M mask (e.g. `2:4`, `tensorrt`) always has sparsity 1 - N/M, so it cannot follow "
    "a gradual schedule from init_sparsity to final_sparsity; SparseML failed at the first "
    "update inside training.",
    "mask_type: '2:4'\ninit_sparsity: 0.05\nfinal_sparsity: 0.5",
    "Set init_sparsity and final_sparsity both to 1 - N/M (0.5 for 2:4).",
)
M011 = _code(
    "M011", "error", "sparsity outside [0, 1)",
    "A sparsity is the fraction of weights set to zero: 1.0 would remove every weight.",
    "final_sparsity: 1.2", "Use a value from 0 up to, not including, 1.",
)
M012 = _code(
    "M012", "error", "second-order pruning cannot run as configured",
    "M-FAC and OBS rank weights with an inverse Fisher built from gradients. They need enough "
    "gradients before each pruning step, a grad sampler where the gradients are sampled "
    "(OBS always, one-shot M-FAC), a mask type they can score, and memory for the gradients "
    "and the inverse. SparseML found out inside `optimizer.step()`, or ran out of memory; "
    "recipe-spec refuses the recipe at `modify()`, before training.",
    "- !MFACPruningModifier\n  start_epoch: 1\n  num_grads: 256   # with 100 steps per epoch",
    "Lower num_grads (or fisher_block_size for memory), start pruning later, or pass "
    "grad_sampler={'data_loader_builder': ..., 'loss_function': ...}.",
)
M013 = _code(
    "M013", "warning", "argument left to a default SparseML did not have",
    "The SparseML recipe guide documents the argument as optional and shows examples without "
    "it (`- !TrainableParamsModifier {params: __ALL__}`), so recipe-spec runs them with the "
    "default the guide implies (`trainable: true`); SparseML's own code required it and "
    "stopped with a TypeError, so the recipe does not load there.",
    "- !TrainableParamsModifier\n  params: __ALL__",
    "Write the value (`trainable: true` or `trainable: false`) so the recipe means the same "
    "everywhere.",
)

# --- E: epochs and schedules ---------------------------------------------------------------
E001 = _code(
    "E001", "error", "end before start",
    "A modifier whose end_epoch comes before its start_epoch never runs as intended "
    "(end_epoch -1 means 'never ends' and is fine).",
    "start_epoch: 10\nend_epoch: 5", "Swap the epochs, or use end_epoch: -1.",
)
E002 = _code(
    "E002", "error", "learning-rate milestone outside the modifier's range",
    "MultiStepLR milestones are absolute epochs and must lie after start_epoch and before "
    "end_epoch; SparseML found out only at the first optimizer step.",
    "start_epoch: 5\nlr_kwargs: {milestones: [3, 8]}", "Move the milestone inside the range.",
)
E003 = _code(
    "E003", "error", "end_epoch on QuantizationModifier",
    "Quantization-aware training has no end: once modules are quantized they stay quantized.",
    "- !QuantizationModifier\n  start_epoch: 5\n  end_epoch: 10",
    "Remove end_epoch (or set it to -1).",
)
E004 = _code(
    "E004", "warning", "two learning-rate modifiers active at once",
    "Two modifiers that set the learning rate over overlapping epochs overwrite each other "
    "at every step; which one wins depends on their order.",
    "- !LearningRateModifier {start_epoch: 0, end_epoch: 10, ...}\n"
    "- !LearningRateFunctionModifier {start_epoch: 5, end_epoch: 15, ...}",
    "Make the ranges follow each other.",
)
E005 = _code(
    "E005", "error", "parameter pruned by two modifiers at once",
    "Two pruning modifiers that name the same parameter over overlapping epochs fight over "
    "its mask.",
    "- !GMPruningModifier {params: [fc.weight], start_epoch: 0, end_epoch: 10, ...}\n"
    "- !GMPruningModifier {params: [fc.weight], start_epoch: 5, end_epoch: 15, ...}",
    "Give each parameter to one modifier, or make the ranges follow each other.",
)
E006 = _code(
    "E006", "warning", "scheduled after the recipe's end",
    "A recipe lasts max_epochs, its latest start or end epoch: a MultiStepLR milestone at or "
    "after it (of a modifier running to the end) never happens, and an EpochRangeModifier "
    "ending earlier does not end training. A --var override can move these epochs silently.",
    "- !EpochRangeModifier {start_epoch: 0, end_epoch: 30}\n"
    "- !LearningRateModifier {start_epoch: 0, end_epoch: -1, lr_class: MultiStepLR, "
    "lr_kwargs: {milestones: [43], gamma: 0.1}, init_lr: 0.01}\n"
    "- !GMPruningModifier {params: __ALL_PRUNABLE__, init_sparsity: 0.05, final_sparsity: 0.8, "
    "start_epoch: 0, end_epoch: 40, update_frequency: 1}",
    "End every modifier, and put every milestone, before the recipe's last epoch.",
)

# --- B: backend support --------------------------------------------------------------------
B001 = _code(
    "B001", "error", "modifier not available on the chosen backend",
    "The backend chosen with --backend does not implement this modifier.",
    "recipe-spec validate r.yaml --backend keras  # with an OBSPruningModifier",
    "Run the recipe on a backend that has the modifier (docs/modifiers/index.md lists them).",
)

# --- C: tool versions of the stage/group dialect (SparseML 1.6+, llm-compressor) ----------
C001 = _code(
    "C001", "warning", "not accepted by every tool version",
    "SparseML 1.6-1.9 and the llm-compressor releases each accept their own set of modifiers "
    "and arguments: an argument removed in one release is an error there (llm-compressor 0.7+ "
    "forbids unknown arguments) or silently has no effect (SparseML). Without `--compat` this "
    "is a warning naming the versions; with `--compat TOOL[==VERSION]` it is an error when "
    "that version does not accept it.",
    "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      sequential_update: false  "
    "# removed in llm-compressor 0.8",
    "Remove or rename the argument as the hint says, or choose the tool version with --compat.",
)
C002 = _code(
    "C002", "warning", "silently ignored by the tool",
    "Both tools drop keys of a stage/group recipe without a word: unknown stage keys "
    "(`run_typ:`), `run_type` since llm-compressor 0.5, top-level `*_modifiers` groups and "
    "`stages:` since llm-compressor 0.7 (a mis-indented recipe then loads as an empty one), and "
    "a numbered stage key (`quant_stage_1:`, which only llm-compressor's nightly after 0.14 "
    "reads: an error for every release). What the chosen tool would ignore is reported, an "
    "error when nothing would be left.",
    "sparsity_stage:\nsparsity_modifiers:   # not indented under the stage\n  SparseGPTModifier: {...}",
    "Indent the group under its `*_stage:` key, fix the key's spelling, or remove it.",
)
C003 = _code(
    "C003", "warning", "eval() the tool does not evaluate",
    "SparseML and llm-compressor up to 0.5 evaluate `eval(...)` strings (no nested "
    "parentheses; the result becomes a float). llm-compressor 0.6 removed it: the string "
    "reaches the modifier as text. A nested parenthesis is an error in every version.",
    "end: eval(warm_up_epochs + pruning_epochs)   # text in llm-compressor >= 0.6",
    "Write the value itself, or fill it in before the recipe is read (e.g. --var with "
    "`recipe-spec render`).",
)
C004 = _code(
    "C004", "error", "AWQModifier without a later quantization modifier",
    "Since AWQ became a transform (llm-compressor 0.11), it only rescales weights: a "
    "QuantizationModifier or GPTQModifier must follow it in the recipe, or llm-compressor "
    "stops with 'Recipe includes AWQModifier with no subsequent quantization modifier'.",
    "quant_stage:\n  quant_modifiers:\n    AWQModifier: {duo_scaling: both}",
    "Add a QuantizationModifier (or GPTQModifier) with the scheme after AWQModifier.",
)

C005 = _code(
    "C005", "warning", "an `ignore` name the tool does not match",
    "SparseGPTModifier and WandaPruningModifier in llm-compressor 0.5 and later name each layer "
    "they prune `<what a target matched>.<the layer inside it>`. With `targets: [Linear]` (the "
    "default) a target matches the layer itself, so the output layer is named `lm_head.` (with "
    "a trailing dot): a plain name in `ignore` such as `lm_head` matches nothing and that layer "
    "is pruned. Only a `re:` pattern (`re:.*lm_head`) excludes it. recipe-spec's `oneshot` "
    "excludes the named layer as written.",
    "sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
    "      ignore: [lm_head]   # llm-compressor prunes lm_head all the same",
    "Write the entry as a `re:` pattern (`re:.*lm_head`), which both tools read the same way.",
)
C006 = _code(
    "C006", "warning", "MagnitudePruningModifier prunes nothing in the tool's oneshot",
    "llm-compressor's MagnitudePruningModifier computes its masks when it starts but multiplies "
    "them into the weights only after optimizer steps. `oneshot()` takes none, so the model "
    "comes out dense (every release). recipe-spec's `oneshot` prunes each target to "
    "`final_sparsity` by magnitude. A recipe whose modifier runs over training steps (an `end` "
    "after its `start`, or `run_type: train`) is not reported.",
    "oneshot_stage:\n  pruning_modifiers:\n    MagnitudePruningModifier:\n"
    "      targets: ['re:model\\.layers\\.\\d+\\..*_proj$']\n      init_sparsity: 0.5\n      final_sparsity: 0.5",
    "With llm-compressor, prune in one shot with SparseGPTModifier or WandaPruningModifier, or "
    "run the recipe with its training entry point; recipe-spec's oneshot runs it as written.",
)
C007 = _code(
    "C007", "warning", "per-layer sparsity the tool's oneshot does not run",
    "`sparsity_profile: owl` (with `owl_m`, `owl_lmbda`) gives each decoder layer its own "
    "sparsity from the outliers of its weights times its input norms. llm-compressor 0.11 and "
    "later cannot finish such a run: 0.13+ stops in its initialisation ('Cannot invoke event "
    "before initializing'), 0.11-0.12 hand the whole per-layer dict to each layer. From 0.5 the "
    "per-layer values are counted against the `targets` matches, so OWL also needs targets "
    "that match the decoder layers themselves. recipe-spec's `oneshot` runs OWL, one value per "
    "decoder layer.",
    "sparsity_stage:\n  sparsity_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n"
    "      sparsity_profile: owl\n      owl_m: 5\n      owl_lmbda: 0.08",
    "With llm-compressor, write one sparsity or a list with one value per target match; or run "
    "the recipe with recipe-spec's oneshot.",
)

# --- P: parameter patterns (recipe-spec lint, and P005 in validate), registered last from a
# module of their own (this one would pass 450 lines) --------------------------------------
from .codes_params import *  # noqa: E402, F403 - P001 ... P013 (codes_params.__all__)
