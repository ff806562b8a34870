"""One-shot checks from a checkpoint's headers (``recipe-spec lint RECIPE --model DIR``) and
the llm-compressor differences ``validate`` warns about (C005, C006).

The checkpoints are written here from a ``LlamaConfig`` (config.json) plus a safetensors file
whose tensors are all zero: only the headers are read, and nothing is downloaded."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from recipe_spec.cli import main
from recipe_spec.oneshot.checkpoint import read_model
from recipe_spec.oneshot.estimate import estimate
from recipe_spec.oneshot.modifiers import runnable
from recipe_spec.oneshot.rates import Rates, measure
from recipe_spec.params.architectures import decoder_layer_class, hidden_size, layer_count
from recipe_spec.validation import validate

SGPT = """\
sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier:
      sparsity: 0.5
      mask_structure: "2:4"
      ignore: ["re:.*lm_head"]
"""


def llama_config(hidden: int = 64, intermediate: int = 128, layers: int = 2, vocab: int = 128) -> dict:
    """A LlamaConfig as config.json holds it (transformers' own when installed)."""
    try:
        import transformers
    except ImportError:
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
                "intermediate_size": intermediate, "num_hidden_layers": layers, "num_attention_heads": 4,
                "num_key_value_heads": 4, "vocab_size": vocab, "max_position_embeddings": 256,
                "tie_word_embeddings": False}
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=vocab,
                                   max_position_embeddings=256, tie_word_embeddings=False)
    out = cfg.to_dict()
    out["architectures"] = ["LlamaForCausalLM"]
    return out


def llama_shapes(config: dict) -> dict[str, list[int]]:
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes |= {p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
        shapes |= {p + f"self_attn.{x}_proj.weight": [h, h] for x in "qkvo"}
        shapes |= {p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                   p + "mlp.down_proj.weight": [h, i]}
    return shapes


def header_checkpoint(folder: Path, **config: int) -> Path:
    """config.json and a model.safetensors of zeros (its header is what is read)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = llama_config(**config)
    (folder / "config.json").write_text(json.dumps(cfg))
    write_header(folder, llama_shapes(cfg))
    return folder


def write_header(folder: Path, shapes: dict[str, list[int]]) -> None:
    """A model.safetensors of float32 zeros with ``shapes`` in ``folder``."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4
        for d in shape:
            size *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# -- the decoder layer from config.json ------------------------------------------------------------

@pytest.mark.parametrize(("config", "expected"), [
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, "LlamaDecoderLayer"),
    ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, "Qwen2DecoderLayer"),
    ({"architectures": ["MistralForCausalLM"]}, "MistralDecoderLayer"),
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "GPT2Block"),
    ({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}, "GPTNeoXLayer"),
    ({"model_type": "bloom"}, "BloomBlock"),
    ({}, None),
])
def test_decoder_layer_class_without_torch(config: dict, expected: str | None) -> None:
    assert decoder_layer_class(config) == expected


def test_hidden_size_and_layers_from_config() -> None:
    cfg = llama_config(hidden=96, layers=3)
    assert (hidden_size(cfg), layer_count(cfg)) == (96, 3)
    assert (hidden_size({"text_config": {"hidden_size": 8}}), layer_count({"n_layer": 12})) == (8, 12)


def test_read_model_from_headers_alone(tmp_path: Path) -> None:
    model = read_model(header_checkpoint(tmp_path / "m"))
    assert model.blocks == ("model.layers.0", "model.layers.1") and model.decoder_class == "LlamaDecoderLayer"
    prunable = {i.name: i.weight_shape for i in model.modules if i.prunable}
    assert "model.embed_tokens" not in prunable and prunable["lm_head"] == (128, 64)
    assert prunable["model.layers.1.mlp.down_proj"] == (64, 128) and len(prunable) == 15
    assert model.hidden == 64 and model.block_params[0] == 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64


# -- lint: N:M, sequential targets, the estimate ----------------------------------------------------

def test_nm_structure_needs_divisible_in_features(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT)
    folder = header_checkpoint(tmp_path / "m", intermediate=130)
    code, out, _ = run(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor",
                        "--format", "json"], capsys)
    assert code == 1
    found = [d for d in json.loads(out)["files"][0]["diagnostics"] if d["code"] == "P004"]
    assert len(found) == 1 and (found[0]["line"], found[0]["column"]) == (5, 23)
    assert "model.layers.0.mlp.down_proj (in 130)" in found[0]["message"]
    assert "model.layers.1.mlp.down_proj (in 130)" in found[0]["message"]
    assert "ignore:" in found[0]["hint"]
    ok = header_checkpoint(tmp_path / "ok", intermediate=128)
    assert main(["lint", str(recipe), "--model", str(ok), "--compat", "llmcompressor", "--select", "P"]) == 0


def test_estimate_is_printed_with_the_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT)
    folder = header_checkpoint(tmp_path / "m")
    code, out, _ = run(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor",
                        "--num-samples", "16", "--seq-len", "32"], capsys)
    assert code == 0, out
    # down_proj: 128 inputs -> 128^2 x 4 B = 64 KiB; one block: 4 x 16 KiB + 2 x 16 KiB + 64 KiB
    assert "largest 64.0 KiB (model.layers.0.mlp.down_proj)" in out
    assert "one block at a time: 160.0 KiB" in out
    assert "activation cache (samples x seq_len x hidden x 4 B): 128.0 KiB" in out  # 16 x 32 x 64 x 4
    assert "14 target layers, sequential pipeline" in out and "16 samples x 32 tokens" in out
    # float32: a block (4 x 64x64 + 3 x 64x128 + 2 norms of 64 = 41,088) x 4 B = 164,352 B; outside: embedding
    # and head 128 x 64, the final norm 64, x 4 B = 65,792 B; the whole: 2 blocks + outside = 394,496 B
    assert ("weights in host memory: 224.8 KiB (the largest block, 160.5 KiB, and the layers outside the "
            "blocks, 64.2 KiB), streamed one block at a time from this folder; 385.2 KiB for the model loaded "
            "whole") in " ".join(out.split())


def test_estimate_counts_the_solve_and_statistics(tmp_path: Path) -> None:
    from recipe_spec import load

    model = read_model(header_checkpoint(tmp_path / "m"))
    rates = Rates(matmul=1e10, factor=2e9, column_base=1e-5, column_per_row=1e-7, step=1e-6)
    found = estimate(runnable(load(SGPT)), model, 16, 32, rates=rates)
    (cost,) = found.costs
    tokens = 16 * 32
    columns = [64] * 6 + [128]  # q k v o gate up: 64 inputs; down: 128
    rows = [64] * 4 + [128] * 2 + [64]
    pairs = list(zip(rows, columns, strict=True))
    assert cost.statistic_flops == sum(2.0 * tokens * c * c for c in columns)
    assert cost.solve_flops == pytest.approx(sum(r * c * c for r, c in pairs))
    assert cost.factor_flops == pytest.approx(sum(5 / 3 * c ** 3 for c in columns))
    assert sorted(cost.columns) == sorted((c, r) for r, c in pairs)
    # the products of the block and the attention scores (4 x seq_len x hidden per token), two passes
    assert cost.forward_flops == 2 * (2.0 * model.block_params[0] * tokens + 4.0 * 32 * 64 * tokens)
    assert cost.blocks == 2 and cost.calls == 2 * 16
    # the time at those rates, worked by hand: per block products / 1e10, factorisations / 2e9,
    # each column 1e-5 + 1e-7 x rows, each call 60 steps of 1e-6 s; two blocks
    per_block = ((cost.forward_flops + cost.statistic_flops + cost.solve_flops) / 1e10 + cost.factor_flops / 2e9
                 + sum(c * (1e-5 + 1e-7 * r) for r, c in pairs) + 32 * 60 * 1e-6)
    assert found.seconds == pytest.approx(2 * per_block)
    line = next(x for x in found.lines() if x.strip().startswith("time:"))
    assert "on this machine" in line and "between" in line and "(a GPU, not measured)" in line


def test_the_machine_rates_are_measured() -> None:
    rates = measure(width=128, columns=128)
    assert rates.matmul > 1e8 and rates.factor > 1e7 and rates.step > 0
    assert 0 < rates.column(128) < rates.column(100_000) < 1.0
    assert "measured on this machine (NumPy)" in rates.source


def test_sequential_targets_must_name_a_class_of_the_model(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = header_checkpoint(tmp_path / "m")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT + "      sequential_targets: [LlamaLayer]\n")
    code, out, _ = run(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor==0.9",
                        "--format", "json"], capsys)
    (p006,) = [d for d in json.loads(out)["files"][0]["diagnostics"] if d["code"] == "P006"]
    assert code == 1 and (p006["line"], p006["column"]) == (7, 27)
    assert "LlamaLayer" in p006["message"] and p006["hint"] == "Write LlamaDecoderLayer."
    recipe.write_text(SGPT)
    code, _, err = run(["lint", str(recipe), "--model", str(folder), "--sequential-targets", "LlamaLayer"], capsys)
    assert code == 2 and "LlamaDecoderLayer" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run(["lint", str(recipe), "--model", str(folder), "--sequential-targets", r"re:layers\.\d+$"],
                       capsys)  # re.match: from the start of the name
    assert code == 2 and "re:layers" in err and len(err.strip().splitlines()) == 1
    for good in ("LlamaDecoderLayer", "model.layers.0", r"re:model\.layers\.\d+$"):
        assert main(["lint", str(recipe), "--model", str(folder), "--sequential-targets", good,
                     "--select", "P"]) == 0


def test_sequential_targets_flag_needs_a_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT)
    code, _, err = run(["lint", str(recipe), "--params", str(tmp_path / "none.json"),
                        "--sequential-targets", "X"], capsys)
    assert code == 2 and "error:" in err


# -- validate: what llm-compressor's oneshot does otherwise (C005, C006) ------------------------------

def _codes(text: str, compat: str | None, tmp_path: Path) -> list[tuple[str, int, int]]:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return [(d.code, d.line, d.column) for d in validate(path, compat=compat) if d.code in ("C005", "C006")]


PLAIN = SGPT.replace('["re:.*lm_head"]', "[lm_head, 're:.*embed', model.layers.0.mlp.down_proj]")


@pytest.mark.parametrize("compat", ["llmcompressor==0.14", "llmcompressor==0.5", "llmcompressor", None])
def test_plain_ignore_name_warns_where_llmcompressor_prunes_it(compat: str | None, tmp_path: Path) -> None:
    assert _codes(PLAIN, compat, tmp_path) == [("C005", 6, 16), ("C005", 6, 39)]


@pytest.mark.parametrize("compat", ["llmcompressor==0.4", "sparseml"])
def test_no_c005_where_the_tool_has_no_ignore(compat: str, tmp_path: Path) -> None:
    assert _codes(PLAIN, compat, tmp_path) == []


def test_c005_says_what_to_write(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(PLAIN)
    found = [d for d in validate(path, compat="llmcompressor==0.14") if d.code == "C005"]
    assert "llm-compressor 0.14" in found[0].message and "'lm_head.'" in found[0].message
    assert "'re:.*lm_head'" in found[0].hint
    assert "'re:model\\.layers\\.0\\.mlp\\.down_proj'" in found[1].hint
    assert all(d.severity.value == "warning" for d in found)


def test_no_c005_for_patterns_or_block_targets(tmp_path: Path) -> None:
    assert _codes(SGPT, "llmcompressor", tmp_path) == []
    blocks = PLAIN.replace("      ignore:", "      targets: [LlamaDecoderLayer]\n      ignore:")
    assert _codes(blocks, "llmcompressor", tmp_path) == []


MAGNITUDE = """\
oneshot_stage:
  pruning_modifiers:
    MagnitudePruningModifier:
      targets: ['re:model\\.layers\\.\\d+\\..*_proj$']
      init_sparsity: 0.5
      final_sparsity: 0.5
"""


@pytest.mark.parametrize("compat", ["llmcompressor==0.14", "llmcompressor==0.1", None])
def test_one_shot_magnitude_pruning_warns(compat: str | None, tmp_path: Path) -> None:
    assert _codes(MAGNITUDE, compat, tmp_path) == [("C006", 3, 5)]


@pytest.mark.parametrize("extra", ["      start: 0\n      end: 10\n", "  run_type: train\n"])
def test_magnitude_over_training_is_not_reported(extra: str, tmp_path: Path) -> None:
    text = MAGNITUDE + extra if extra.startswith("      ") else MAGNITUDE.replace(
        "oneshot_stage:\n", "oneshot_stage:\n" + extra)
    assert _codes(text, "llmcompressor", tmp_path) == []
    assert _codes(MAGNITUDE, "sparseml", tmp_path) == []


def test_validate_cli_compat_0_14(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(PLAIN)
    out = subprocess.run([sys.executable, "-m", "recipe_spec", "validate", str(path), "--compat",
                          "llmcompressor==0.14"], capture_output=True, text=True)
    assert out.returncode == 0 and "C005 [warning]" in out.stdout


def test_weights_are_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint whose tensor data is cut off after the header gives the same findings and
    estimate."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT)
    full = header_checkpoint(tmp_path / "full", intermediate=130)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "config.json").write_bytes((full / "config.json").read_bytes())
    data = (full / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: 8 + int.from_bytes(data[:8], "little")])
    argv = ["lint", str(recipe), "--compat", "llmcompressor", "--model"]
    first = run([*argv, str(full)], capsys)
    second = run([*argv, str(cut)], capsys)
    assert first[0] == second[0] == 1
    assert first[1].replace(str(full), "M") == second[1].replace(str(cut), "M") and "P004" in first[1]


def test_fused_experts_are_counted_as_the_run_splits_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Qwen3-MoE checkpoint with transformers 5's fused experts (``gate_up_proj`` ``[E, 2I, H]``,
    ``down_proj`` ``[E, H, I]``): the lint and the estimate see one Linear per expert and
    projection (``mlp.experts.<e>.gate_proj`` ...), the layers the run compresses; an N:M
    structure that an expert's columns do not divide is found on the experts."""
    folder = tmp_path / "moe"
    folder.mkdir()
    hidden, inter, experts = 64, 30, 4
    config = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": hidden,
              "moe_intermediate_size": inter, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "num_experts": experts,
              "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 256, "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(config))
    shapes: dict[str, list[int]] = {"model.embed_tokens.weight": [128, hidden], "model.norm.weight": [hidden],
                                    "lm_head.weight": [128, hidden]}
    for layer in range(2):
        p = f"model.layers.{layer}."
        shapes |= {p + f"self_attn.{x}_proj.weight": [hidden, hidden] for x in "qkvo"}
        shapes |= {p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                   p + "mlp.gate.weight": [experts, hidden],
                   p + "mlp.experts.gate_up_proj": [experts, 2 * inter, hidden],
                   p + "mlp.experts.down_proj": [experts, hidden, inter]}
    write_header(folder, shapes)
    model = read_model(folder)
    prunable = {i.name: i.weight_shape for i in model.modules if i.prunable}
    assert prunable["model.layers.1.mlp.experts.3.gate_proj"] == (inter, hidden)
    assert prunable["model.layers.1.mlp.experts.3.up_proj"] == (inter, hidden)
    assert prunable["model.layers.0.mlp.experts.0.down_proj"] == (hidden, inter)
    assert len([n for n in prunable if ".experts." in n]) == 2 * experts * 3
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SGPT.replace('ignore: ["re:.*lm_head"]', "ignore: [\"re:.*lm_head\", \"re:.*mlp.gate$\"]"))
    code, out, _ = run(["lint", str(recipe), "--model", str(folder), "--compat", "llmcompressor", "--format", "json"],
                       capsys)
    found = [d for d in json.loads(out)["files"][0]["diagnostics"] if d["code"] == "P004"]
    assert code == 1 and len(found) == 1  # down_proj of each expert: 30 columns, not a multiple of 4
    assert "model.layers.0.mlp.experts.0.down_proj (in 30)" in found[0]["message"]
    from recipe_spec import load

    (cost,) = estimate(runnable(load(SGPT.replace('ignore: ["re:.*lm_head"]', 'ignore: ["re:.*lm_head", "re:.*mlp.gate$"]'))),
                       model, 16, 32).costs
    assert cost.targets == 2 * (4 + experts * 3)
