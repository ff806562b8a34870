"""A checkpoint folder compressed one block at a time (``oneshot(model="folder")``,
``recipe-spec oneshot --model DIR``): the model is built without its blocks' weights, each
block comes from the safetensors shards when the run reaches it and leaves when the next
comes. The folder it writes is the one the whole model gives, tensor for tensor (GPTQ, round to
nearest, SparseGPT; bfloat16 and float32; dense and mixture-of-experts), and llm-compressor's
own on its MoE case."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
pytest.importorskip("accelerate")
from recipe_spec_torch.pretrained import load_model  # noqa: E402
from recipe_spec_torch.streaming import store_of  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import recipe_spec  # noqa: E402

IGNORE = "      targets: [Linear]\n      ignore: [lm_head, 're:.*mlp.gate$']\n"
RECIPES = {
    "gptq": "q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n" + IGNORE,
    "rtn": "q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      scheme: W8A8\n" + IGNORE,
    "sparsegpt": "s_stage:\n  s_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n" + IGNORE,
}


def _llama(tie: bool = False, layers: int = 3) -> Any:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tie))


def _moe() -> Any:
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64))


def _data(n: int = 6, length: int = 16) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(1)
    return [{"input_ids": torch.randint(4, 128, (length,), generator=g).tolist(), "attention_mask": [1] * length}
            for _ in range(n)]


def _tensors(folder: pathlib.Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _run(model: Any, recipe: str, **kwargs: Any) -> Any:
    torch.set_num_threads(1)
    return recipe_spec.oneshot(model=model, recipe=recipe, dataset=_data(), num_calibration_samples=6,
                               shuffle_calibration_samples=False, progress=False, **kwargs)


@pytest.mark.parametrize("arch, dtype, recipe", [
    ("llama", torch.bfloat16, "gptq"), ("llama", torch.bfloat16, "rtn"), ("llama", torch.float32, "sparsegpt"),
    ("moe", torch.bfloat16, "gptq"), ("moe", torch.bfloat16, "sparsegpt"),
])
def test_the_streamed_folder_is_the_whole_models(tmp_path: pathlib.Path, arch: str, dtype: Any, recipe: str) -> None:
    (_llama() if arch == "llama" else _moe()).to(dtype).save_pretrained(tmp_path / "ckpt")
    whole = load_model(str(tmp_path / "ckpt"), stream=False)
    assert store_of(whole) is None
    _run(whole, RECIPES[recipe], output_dir=tmp_path / "whole")
    streamed = _run(str(tmp_path / "ckpt"), RECIPES[recipe], output_dir=tmp_path / "streamed")
    store = store_of(streamed)
    assert store is not None and store.resident is None
    want, got = _tensors(tmp_path / "whole"), _tensors(tmp_path / "streamed")
    assert set(want) == set(got) and len(want) > 20
    different = [k for k in want if want[k].dtype != got[k].dtype or not torch.equal(want[k], got[k])]
    assert different == []
    if arch == "moe":
        assert "model.layers.1.mlp.experts.3.down_proj.weight" + ("_packed" if recipe == "gptq" else "") in got
    if recipe == "sparsegpt":
        w = got["model.layers.0.mlp.down_proj.weight" if arch == "llama" else "model.layers.0.mlp.experts.0.up_proj.weight"]
        assert float((w == 0).float().mean()) == pytest.approx(0.5, abs=0.02)
    configs = [json.loads((tmp_path / d / "config.json").read_text()) for d in ("whole", "streamed")]
    assert configs[0] == configs[1]
    assert sorted(p.name for p in (tmp_path / "streamed").iterdir()) == sorted(
        p.name for p in (tmp_path / "whole").iterdir())
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "streamed")
    assert torch.isfinite(loaded(torch.tensor([[5, 6, 7, 8]])).logits).all()


def test_one_block_is_in_memory_at_a_time(tmp_path: pathlib.Path) -> None:
    """After each block of the pipeline, at most one block holds real tensors; every block is
    read from the checkpoint once per pass and its result from the scratch file afterwards."""
    _llama(layers=4).to(torch.bfloat16).save_pretrained(tmp_path / "ckpt")
    model = load_model(str(tmp_path / "ckpt"))
    layers = model.model.layers
    assert all(p.is_meta for p in layers.parameters())
    assert not any(p.is_meta for p in model.model.embed_tokens.parameters())
    seen: list[int] = []

    def progress(what: str, done: int, total: int) -> None:
        seen.append(sum(1 for layer in layers if not any(p.is_meta for p in layer.parameters())))

    recipe_spec.oneshot(model=model, recipe=RECIPES["gptq"], dataset=_data(), num_calibration_samples=6,
                        shuffle_calibration_samples=False, progress=progress)
    assert len(seen) == 5 and max(seen) == 1
    store = store_of(model)
    assert store is not None and store.loads <= 2 * 4


def test_the_returned_model_runs_and_saves_as_the_whole_one(tmp_path: pathlib.Path) -> None:
    """Without output_dir: the model oneshot returns computes what the whole model computes
    after the run (its blocks brought in as the forward pass reaches them), and its
    ``save_pretrained`` writes the same folder; tied embeddings stay tied."""
    _llama(tie=True).to(torch.bfloat16).save_pretrained(tmp_path / "ckpt")
    whole = load_model(str(tmp_path / "ckpt"), stream=False)
    _run(whole, RECIPES["gptq"])
    streamed = _run(str(tmp_path / "ckpt"), RECIPES["gptq"])
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.equal(whole(ids).logits, streamed(ids).logits)
    assert streamed.lm_head.weight is streamed.model.embed_tokens.weight
    whole.save_pretrained(tmp_path / "whole")
    streamed.save_pretrained(tmp_path / "streamed")
    want, got = _tensors(tmp_path / "whole"), _tensors(tmp_path / "streamed")
    assert set(want) == set(got) and "lm_head.weight" not in got
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert (tmp_path / "streamed" / "recipe.yaml").is_file()


def test_a_non_finite_weight_in_the_checkpoint_is_refused_before_the_run(tmp_path: pathlib.Path) -> None:
    _llama().save_pretrained(tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(str(path))
    state["model.layers.2.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(state, str(path), metadata={"format": "pt"})
    with pytest.raises(Exception, match=r"model\.layers\.2\.mlp\.up_proj"):
        _run(str(tmp_path / "ckpt"), RECIPES["gptq"], output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_without_every_name_is_loaded_whole(tmp_path: pathlib.Path) -> None:
    """Names the model does not have (here a block's weight renamed): transformers loads it
    as it can, whole, and nothing is streamed."""
    _llama().save_pretrained(tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(str(path))
    state["model.layers.1.mlp.renamed.weight"] = state.pop("model.layers.1.mlp.up_proj.weight")
    save_file(state, str(path), metadata={"format": "pt"})
    model = load_model(str(tmp_path / "ckpt"))
    assert store_of(model) is None and not any(p.is_meta for p in model.parameters())


def test_a_failed_streamed_run_leaves_no_folder(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec.oneshot import gptq

    _llama().save_pretrained(tmp_path / "ckpt")
    calls = []

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("disk full")
        return real(*args, **kwargs)

    real = gptq.record_quantized
    monkeypatch.setattr(gptq, "record_quantized", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        _run(str(tmp_path / "ckpt"), RECIPES["gptq"], output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "generation_config.json",
                                                                     "model.safetensors"]


def test_llmcompressors_moe_folder_from_a_streamed_checkpoint(tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """llm-compressor 0.14's Qwen3-MoE GPTQ W4A16 folder (every packed expert weight, scale and
    shape), reproduced from the case's checkpoint folder streamed block by block."""
    import numpy as np
    import test_oneshot_moe as moe
    import transformers.models.qwen3_moe.modeling_qwen3_moe as qwen3_moe

    monkeypatch.setattr(qwen3_moe, "create_causal_mask", lambda *args, **kwargs: None)  # as the case ran
    moe._model(moe.GPTQ).save_pretrained(tmp_path / "ckpt")
    torch.set_num_threads(1)
    model = recipe_spec.oneshot(model=str(tmp_path / "ckpt"), recipe=moe._case(moe.GPTQ)["recipe_yaml"],
                                dataset=moe._samples(moe.GPTQ), num_calibration_samples=16,
                                shuffle_calibration_samples=False, progress=False, output_dir=tmp_path / "out")
    assert store_of(model) is not None
    got = {k: v.numpy() for k, v in _tensors(tmp_path / "out").items()}
    with safe_open(str(moe.MOE / moe.GPTQ / "saved" / "model.safetensors"), "np") as ref:
        assert set(ref.keys()) == set(got) and len(got) == 181
        different = [k for k in ref.keys() if not np.array_equal(ref.get_tensor(k), got[k])]
    assert different == []


def test_shards_of_max_shard_size_with_their_index(tmp_path: pathlib.Path) -> None:
    """``save_pretrained(max_shard_size=...)`` on the returned model: the shards and index
    transformers writes for the same size, each tensor's bytes the same."""
    _llama().to(torch.bfloat16).save_pretrained(tmp_path / "ckpt")
    whole = load_model(str(tmp_path / "ckpt"), stream=False)
    streamed = load_model(str(tmp_path / "ckpt"))
    whole.save_pretrained(tmp_path / "whole", max_shard_size="300KB")
    streamed.save_pretrained(tmp_path / "streamed", max_shard_size="300KB")
    index = json.loads((tmp_path / "streamed" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert all((tmp_path / "streamed" / s).stat().st_size <= 300_000 + 4096 for s in shards)
    want, got = _tensors(tmp_path / "whole"), _tensors(tmp_path / "streamed")
    assert set(want) == set(got) == set(index["weight_map"])
    assert all(torch.equal(want[k], got[k]) for k in want)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "streamed")
    assert torch.equal(loaded.model.layers[2].mlp.up_proj.weight, want["model.layers.2.mlp.up_proj.weight"])
