"""One process of a one-shot run under ``torchrun`` (or alone): a seeded tiny Llama, 16
calibration samples, the recipe named on the command line; writes the model's final tensors
and this process's count of decoder-layer forward calls to ``OUT/rank<r>.pt``. ``gptq-streamed``:
GPTQ on the model saved as a checkpoint folder and passed as ``model="folder"`` (streamed
block by block), its output folder only; a ``-sum`` suffix: ``distributed_statistics="sum"``;
``reap``: expert pruning of a tiny Qwen3-MoE (its experts kept in the file too).

    python -m torch.distributed.run --nproc-per-node 2 distributed_oneshot_worker.py RECIPE OUT
"""

from __future__ import annotations

import os
import sys

import torch
import transformers

import recipe_spec

RECIPES = {
    "sparsegpt": "s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n      targets: [Linear]\n"
                 "      ignore: [lm_head]\n",
    "gptq": "q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n      targets: [Linear]\n"
            "      ignore: [lm_head]\n",
    "wanda": "s_stage:\n  s_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n      targets: [Linear]\n"
             "      ignore: [lm_head]\n",
    "awq": "q_stage:\n  q_modifiers:\n    AWQModifier:\n      n_grid: 5\n    QuantizationModifier:\n"
           "      scheme: W4A16_ASYM\n      targets: [Linear]\n      ignore: [lm_head]\n",
    "owl-smoothquant-fp8": "s_stage:\n  s_modifiers:\n    WandaPruningModifier:\n      sparsity: 0.5\n"
                           "      sparsity_profile: owl\n      owl_m: 3\n      owl_lmbda: 0.08\n      targets: [Linear]\n"
                           "      ignore: [lm_head]\nq_stage:\n  q_modifiers:\n    SmoothQuantModifier:\n"
                           "      smoothing_strength: 0.8\n    QuantizationModifier:\n      scheme: FP8\n"
                           "      targets: [Linear]\n      ignore: [lm_head]\n",
    # on a tiny Qwen3-MoE (8 experts, top 2) instead of the Llama
    "reap": "s_stage:\n  s_modifiers:\n    REAPPruningModifier:\n      sparsity: 0.5\n",
}


def main() -> None:
    recipe, out = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if recipe == "reap":
        model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=2, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
            max_position_embeddings=64))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False))
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": torch.randint(4, 128, (24 + i % 5,), generator=g).tolist()} for i in range(16)]
    for d in data:
        d["attention_mask"] = [1] * len(d["input_ids"])
    rank = int(os.environ.get("RANK", "0"))
    if recipe == "gptq-streamed":
        folder = os.path.join(out, f"checkpoint{rank}")
        model.save_pretrained(folder)
        recipe_spec.oneshot(model=folder, recipe=RECIPES["gptq"], dataset=data, num_calibration_samples=16,
                            shuffle_calibration_samples=False, progress=False, output_dir=os.path.join(out, "saved"))
        torch.save({"calls": -1, "state": {}}, os.path.join(out, f"rank{rank}.pt"))
        return
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    for layer in model.model.layers:
        layer.register_forward_pre_hook(count)
    how = "sum" if recipe.endswith("-sum") else "auto"
    recipe = recipe.removesuffix("-sum")
    if recipe.endswith("-partitioned"):  # each process loads its own part, as llm-compressor's scripts do
        from recipe_spec.datasets.utils import get_rank_partition

        part = get_rank_partition("train", len(data))
        start, end = (int(x) for x in part[len("train["):-1].split(":"))
        data = data[start:end]
        recipe = recipe.removesuffix("-partitioned")
    recipe_spec.oneshot(model=model, recipe=RECIPES[recipe], dataset=data, num_calibration_samples=16,
                        shuffle_calibration_samples=False, progress=False, distributed_statistics=how,
                        output_dir=os.path.join(out, "saved") if recipe == "gptq" else None)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"calls": calls[0], "state": state, "experts": recipe_spec.oneshot.last_report().experts},
               os.path.join(out, f"rank{rank}.pt"))


if __name__ == "__main__":
    main()
