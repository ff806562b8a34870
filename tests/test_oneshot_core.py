"""The framework-free parts of ``recipe_spec.oneshot``: which modifiers run, their arguments,
which modules they select, the calibration order, and what is refused before anything runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import recipe_spec
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.oneshot.calibration import order_samples, read_samples
from recipe_spec.oneshot.host import ModuleInfo
from recipe_spec.oneshot.modifiers import resolve, select_modules
from recipe_spec.validation import validate_recipe

TORCH = frozenset({"oneshot", "scores:sparsegpt", "scores:wanda", "scores:magnitude"})


def _recipe(body: str) -> recipe_spec.Recipe:
    return recipe_spec.loads("sparsity_stage:\n  sparsity_modifiers:\n" + body)


def _llama_modules() -> list[ModuleInfo]:
    lin = ("Linear", "Module")
    out = [ModuleInfo("", ("LlamaForCausalLM", "Module"), False), ModuleInfo("model", ("LlamaModel", "Module"), False)]
    for i in range(2):
        out.append(ModuleInfo(f"model.layers.{i}", ("LlamaDecoderLayer", "Module"), False))
        out += [ModuleInfo(f"model.layers.{i}.self_attn.{p}", lin, True, (64, 64)) for p in ("q_proj", "o_proj")]
    return out + [ModuleInfo("lm_head", lin, True, (128, 64))]


def test_import_recipe_spec_and_its_oneshot_name_import_no_framework() -> None:
    code = ("import sys, recipe_spec; f = recipe_spec.oneshot; import recipe_spec.oneshot; "
            "from recipe_spec.oneshot import pipeline, checkpoint; "
            "assert recipe_spec.oneshot is f and callable(f) and f.last_report() is None; "
            "print([m for m in ('torch', 'transformers', 'keras', 'tensorflow', 'datasets') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_old_package_name_still_imports_the_entry_points() -> None:
    import recipe_spec
    from recipe_spec.one_shot import apply_oneshot, last_report, oneshot
    from recipe_spec.oneshot import api

    assert oneshot is recipe_spec.oneshot and apply_oneshot is api.apply_oneshot
    assert last_report is recipe_spec.oneshot.last_report


def test_sparsegpt_arguments_and_defaults_resolve() -> None:
    r = _recipe("    SparseGPTModifier:\n      sparsity: 0.5\n      mask_structure: '2:4'\n"
                "      block_size: 32\n      ignore: ['re:.*lm_head']\n")
    (m,) = resolve(r, TORCH, "torch")
    assert (m.kind, m.sparsity, m.prune_n, m.prune_m, m.block_size, m.dampening_frac) == ("sparsegpt", 0.5, 2, 4, 32, 0.01)
    assert m.targets == ("Linear",) and m.needs_data and m.pipeline == "sequential"
    (w,) = resolve(_recipe("    WandaPruningModifier:\n      sparsity: 0.3\n"), TORCH, "torch")
    assert (w.kind, w.prune_n, w.prune_m, w.sparsity) == ("wanda", 0, 0, 0.3)


def test_plain_lm_head_in_ignore_excludes_it() -> None:
    for ignore in ("lm_head", "re:.*lm_head"):
        (m,) = resolve(_recipe(f"    SparseGPTModifier:\n      sparsity: 0.5\n      ignore: ['{ignore}']\n"), TORCH, "torch")
        names = select_modules(_llama_modules(), m)
        assert "lm_head" not in names and len(names) == 4
    (m,) = resolve(_recipe("    SparseGPTModifier:\n      sparsity: 0.5\n"), TORCH, "torch")
    assert select_modules(_llama_modules(), m)[-1] == "lm_head"


def test_targets_match_a_block_and_take_every_linear_inside_it() -> None:
    (m,) = resolve(_recipe("    WandaPruningModifier:\n      sparsity: 0.5\n      targets: ['re:model.layers.1$']\n"),
                   TORCH, "torch")
    assert select_modules(_llama_modules(), m) == ["model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.o_proj"]


def test_a_backend_without_the_one_shot_capabilities_refuses_with_located_b001() -> None:
    r = _recipe("    SparseGPTModifier:\n      sparsity: 0.5\n")
    with pytest.raises(RecipeError) as err:
        resolve(r, frozenset({"masks", "scores:magnitude"}), "keras")
    (d,) = err.value.diagnostics
    assert (d.code, d.line, d.column) == ("B001", 3, 5) and "oneshot" in d.message
    assert not [d for d in validate_recipe(r, backend="keras") if d.code == "B001"]  # Keras runs it


def test_unsupported_modifiers_and_arguments_are_refused_where_written() -> None:
    r = recipe_spec.loads("quant_stage:\n  quant_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                          "      targets: [Linear]\n")
    with pytest.raises(RecipeError) as err:
        resolve(r, TORCH, "torch")
    assert [(d.code, d.line) for d in err.value.diagnostics] == [("B001", 3)]
    r = _recipe("    SparseGPTModifier:\n      sparsity: 0.5\n      sequential_targets: [LlamaDecoderLayer]\n")
    with pytest.raises(RecipeError) as err:
        resolve(r, TORCH, "torch")
    assert [(d.code, d.line) for d in err.value.diagnostics] == [("B001", 5)]


def test_a_training_recipe_is_refused() -> None:
    r = recipe_spec.loads("modifiers:\n  - !ConstantPruningModifier\n    params: ['re:.*weight']\n")
    with pytest.raises(RecipeError, match="stage/group"):
        resolve(r, TORCH, "torch")


def test_validate_refuses_a_sparsity_an_nm_structure_overrides() -> None:
    r = _recipe("    SparseGPTModifier:\n      sparsity: 0.7\n      mask_structure: '2:4'\n")
    found = [d for d in validate_recipe(r) if d.code == "M006"]
    assert [(d.line, d.column) for d in found] == [(4, 17)] and "sparsity: 0.5" in found[0].hint
    assert not [d for d in validate_recipe(_recipe("    SparseGPTModifier:\n      sparsity: 0.5\n"
                                                   "      mask_structure: '2:4'\n")) if d.code == "M006"]


def test_calibration_order_is_longest_first_or_a_seeded_shuffle() -> None:
    by_length = lambda lengths: sorted(range(len(lengths)), key=lambda i: -lengths[i])  # noqa: E731
    assert order_samples([3, 9, 5], shuffle=False, seed=0, longest_first=by_length) == [1, 2, 0]
    a = order_samples(list(range(20)), shuffle=True, seed=7, longest_first=by_length)
    assert a == order_samples(list(range(20)), shuffle=True, seed=7, longest_first=by_length) and sorted(a) == list(range(20))


def test_samples_are_read_from_dicts_or_a_datasets_like_table() -> None:
    class Table:
        column_names = ["input_ids", "attention_mask"]

        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": [i] * (i + 1), "attention_mask": [1] * (i + 1)}

    assert [len(s["input_ids"]) for s in read_samples(Table())] == [1, 2]
    assert read_samples([[1, 2, 3]]) == [{"input_ids": [1, 2, 3]}]  # a list of token ids
    with pytest.raises(TypeError, match="input_ids"):
        read_samples([{"ids": [1, 2, 3]}])
