"""The diagnostic codes of the parameter family (``P``: parameter patterns and layer names
against a model), registered in :mod:`.code_table` after the others; :mod:`.codes` re-exports
them, so ``codes.P001`` is the one way to name each."""

from __future__ import annotations

from .code_table import register as _code

__all__ = ["P001", "P002", "P003", "P004", "P005", "P006", "P007", "P008", "P009", "P010", "P011", "P012", "P013",
           "P014", "P015"]

P001 = _code(
    "P001", "error", "pattern matches no parameter",
    "An exact name or `re:` pattern that selects nothing means the modifier silently skips "
    "what its author meant to prune or freeze; SparseML only found out at run time.",
    "params: ['re:bert\\.encoder\\.layr\\.\\d+\\.output\\.dense\\.weight']",
    "Fix the name; the hint lists the closest real parameter names.",
)
P002 = _code(
    "P002", "warning", "pruning hits biases or norm parameters",
    "`__ALL__` or a broad regex also selects biases and normalisation parameters, which are "
    "tiny, sensitive, and almost never meant to be pruned.",
    "- !GMPruningModifier\n  params: __ALL__", "Use `__ALL_PRUNABLE__`, or narrow the regex to `\\.weight$`.",
)
P003 = _code(
    "P003", "error", "parameter pruned by two modifiers at once",
    "Two pruning modifiers whose patterns select the same parameter over overlapping epochs "
    "fight over its mask.",
    "- !GMPruningModifier {params: __ALL_PRUNABLE__, start_epoch: 0, end_epoch: 10, ...}\n"
    "- !GMPruningModifier {params: ['re:fc.*'], start_epoch: 5, end_epoch: 15, ...}",
    "Narrow the patterns so each parameter has one pruning modifier at a time.",
)
P004 = _code(
    "P004", "error", "mask type does not fit the parameter's shape",
    "An N:M mask needs the input dimension to be a multiple of M, a block shape must divide "
    "the parameter's shape; block4 on a dimension not divisible by 4 pads the last block "
    "(a warning: it runs, but the sparsity differs from the target).",
    "mask_type: '2:4'   # on a Linear(10, 3): 3 input features", "Exclude the parameter or change the mask type.",
)
P005 = _code(
    "P005", "error", "bad regex",
    "A `re:` pattern that does not compile cannot select anything (`re:*lm_head`: nothing to "
    "repeat). Patterns run on a linear-time matcher (no backtracking, so `(a+)+` is as fast "
    "as `a+`): a training recipe's `params`, and a stage/group recipe's `targets`, `ignore`, "
    "`sequential_targets` and `mappings` wherever recipe-spec matches them (`oneshot()`, the "
    "`oneshot` command and its estimate, `lint --model`). A backreference, lookaround, "
    "conditional or atomic group, or a pattern that expands to more than 1,000 states "
    "(`(a{1,100}){1,100}`) is outside it and refused before anything runs, with what to "
    "write instead.",
    "params: ['re:conv[0-9']", "Fix the regex (Python `re` syntax); select without lookaround or backreferences.",
)
P006 = _code(
    "P006", "error", "a modifier names a layer that does not exist",
    "A layer in QuantizationModifier's `submodules` or `ignore`, or in LayerPruningModifier's "
    "`layers`, that the model does not have is a typo: the layer meant to be quantized (kept "
    "in float, removed) is not.",
    "- !QuantizationModifier\n  ignore: [classifer]", "Use a layer name (or, for ignore, a layer type) of the model.",
)
P007 = _code(
    "P007", "warning", "ignore removes everything the modifier targets",
    "An `ignore` list that covers every module the `targets` select leaves the modifier with "
    "nothing to do; llm-compressor runs it without a word (`ignore: [\"re:.*\"]`, "
    "llm-compressor #91). On PyTorch, `modify()` refuses, as an error, a QuantizationModifier "
    "whose `submodules` / `ignore` leave no Linear or Conv layer of the model to quantize: it "
    "would fail at its start step.",
    "GPTQModifier:\n  targets: [Linear]\n  ignore: ['re:.*']", "Narrow the ignore patterns.",
)
P008 = _code(
    "P008", "warning", "regex pitfall in targets/ignore",
    "SparseML and llm-compressor compare a target with the module's full dotted name "
    "(`model.layers.0.mlp.down_proj`) or its class name: exactly, or after `re:` with "
    "`re.match`, which starts at the beginning of the name. So regex text without `re:` "
    "(`.*lm_head`), and a pattern or name that begins inside a layer (`re:mlp.down_proj`, "
    "`q_proj`), match nothing, without a word from llm-compressor. So does a pattern whose "
    "backslashes YAML changed: in double quotes `\"\\b\"` becomes a backspace, and `\\\\` "
    "copied from Python source asks for a literal backslash (llm-compressor #1230, #1428, "
    "PR #2803, vLLM #48508).",
    "GPTQModifier:\n  scheme: W4A16\n  ignore: ['.*lm_head', 're:mlp.down_proj']",
    "Write the pattern the hint gives: with `re:`, with a leading `.*` for the layers before "
    "it, and in single quotes, where YAML keeps a backslash as typed.",
)
P009 = _code(
    "P009", "info", "unescaped `.` in a `re:` pattern",
    "In a regex `.` matches any character, so `re:mtp.layers.*` also matches `mtpXlayers`: "
    "looser than meant, though a real model seldom has a name it wrongly catches. Where the "
    "same pattern escapes another dot (`re:.*mixer.gate\\..*`) the plain one is a slip, "
    "reported as a warning (PR #2803).",
    "GPTQModifier:\n  scheme: W4A16\n  ignore: ['re:.*mixer.gate\\..*']",
    "Write `\\.` for each literal dot: `'re:.*mixer\\.gate\\..*'`.",
)
P010 = _code(
    "P010", "error", "a removed layer changes the shape of what flows through it",
    "LayerPruningModifier replaces each named layer with an identity. A layer whose output "
    "cannot have its input's shape (a Linear from 64 to 32 features, a convolution that changes "
    "the channels or, without padding, the spatial size, an Embedding) cannot be removed that "
    "way: the next layer would get its input in the wrong shape at the start step, mid-training. "
    "`modify()` refuses it on PyTorch, where the layer's sizes are known.",
    "- !LayerPruningModifier\n  layers: [fc1]   # a Linear from 64 to 32 features",
    "Remove only layers whose output has their input's shape (residual blocks, square layers).",
)
P011 = _code(
    "P011", "error", "a modifier freezes every parameter of the model",
    "A TrainableParamsModifier with `trainable: false` whose `params` select every parameter "
    "of the model leaves nothing to train: from its start, the loss has no gradient and "
    "`backward()` fails (PyTorch: 'element 0 of tensors does not require grad'), mid-training. "
    "`lint` reports it against the model's parameters and `modify()` refuses the recipe.",
    "- !TrainableParamsModifier\n  params: __ALL__\n  trainable: false\n  start_epoch: 0\n  end_epoch: -1",
    "Freeze only some parameters (e.g. the embeddings), leaving the rest trainable.",
)
P012 = _code(
    "P012", "error", "a quantization group size does not divide a layer's in_features",
    "Group quantization (`scheme: W4A16` and the other WxAy presets: groups of 128; NVFP4: 16; "
    "MX: 32; `config_groups` with `strategy: group` and a `group_size`) gives each output row "
    "one scale per `group_size` consecutive input columns, so every target's `in_features` must "
    "be a multiple of it. llm-compressor 0.14 refuses a layer with more columns after loading "
    "the model, and one with fewer (64 columns under W4A16) passes that check and stops at "
    "calibration with `RuntimeError: unflatten`. `lint --model` names the layers from the "
    "checkpoint's headers.",
    "quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W4A16   # a model with hidden_size 64\n"
    "      ignore: [lm_head]",
    "Use a group size that divides every target's in_features (the hint gives the largest), "
    "or leave the layers out with `ignore`.",
)
P013 = _code(
    "P013", "error", "recipe written for another naming scheme",
    "When most of a recipe's parameter names match nothing in the model, the recipe was written "
    "for a model that names its parameters otherwise (SparseML's model-zoo ResNet-50 has "
    "`sections.0.0.conv1.weight` where torchvision's has `layer1.0.conv1.weight`). `lint` "
    "reports this once, naming both layouts and the closest renaming that carries the "
    "recipe's names onto the model's, instead of one P001 per name.",
    "params: ['sections.0.0.conv1.weight', 'sections.0.0.conv2.weight', ...]   # on torchvision's resnet50",
    "Rename the parameters as the mapping in the hint says (e.g. `sections.N.M -> layer(N+1).M`), "
    "or lint against the model the recipe was written for.",
)
P014 = _code(
    "P014", "error", "a rotation does not fit a layer's width",
    "QuIPModifier and SpinQuantModifier rotate each targeted layer's input (or output) width in "
    "blocks of `transform_block_size` (default: the whole width), so the block must divide the "
    "width, and a `hadamard` rotation needs a power of two (compressed-tensors builds no other "
    "deterministic Hadamard matrix; `random-hadamard` takes a power of two times one of its known "
    "sizes, `random-matrix` any size). llm-compressor finds out while rotating the loaded model. "
    "`lint --model` names the layers from the checkpoint's headers.",
    "quant_stage:\n  quant_modifiers:\n    QuIPModifier:\n      transform_type: hadamard   # intermediate_size 96\n",
    "Pick a `transform_block_size` that divides every rotated width and is a power of two, or "
    "use `transform_type: random-matrix`.",
)
P015 = _code(
    "P015", "error", "expert pruning does not fit the model",
    "REAPPruningModifier removes `int(experts x sparsity)` experts of every mixture-of-experts layer, "
    "so the model must have such layers (numbered experts beside a router), the sparsity must drop "
    "at least one expert and leave at least the router's `top_k` (`num_experts_per_tok`) a token "
    "can reach, and `ignore` may not leave some layers whole: the config holds one expert count for "
    "every layer, so a checkpoint pruned in part does not load (llm-compressor 0.14 saves it "
    "anyway). `lint --model` reads the layers from the checkpoint's headers and the counts from "
    "its `config.json`.",
    "prune_stage:\n  prune_modifiers:\n    REAPPruningModifier:\n      sparsity: 0.9   # 8 experts, top 2\n",
    "Lower the sparsity so that at least `top_k` experts stay (or raise it to drop at least one), "
    "and prune every layer.",
)
