"""Names of a Hugging Face checkpoint directory read from safetensors headers only."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from timing import cpu_time

from recipe_spec.params.checkpoint import (
    CheckpointError,
    module_classes,
    read_checkpoint,
    read_tensor_names,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _llama(tmp: Path, *, tie: bool = False, shard: str | None = None):
    cfg = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, vocab_size=32,
                                   tie_word_embeddings=tie)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(tmp, safe_serialization=True, **kwargs)
    return model


def write_safetensors(path: Path, names: list[str], *, data: bool = True) -> None:
    """A minimal safetensors file with 2x2 float32 tensors (data zeroed, or left out)."""
    header = {n: {"dtype": "F32", "shape": [2, 2], "data_offsets": [16 * i, 16 * (i + 1)]}
              for i, n in enumerate(names)}
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + (b"\0" * 16 * len(names) if data else b""))


def test_names_match_the_real_model(tmp_path: Path) -> None:
    model = _llama(tmp_path)
    names = read_checkpoint(tmp_path)
    assert set(names.parameters) == set(model.state_dict())
    assert set(names.modules) == {n for n, _ in model.named_modules() if n}
    assert names.model_type == "llama" and names.architectures == ("LlamaForCausalLM",)
    assert names.classes is not None and names.classes["model.layers.0.mlp.up_proj"][0] == "Linear"
    assert names.classes[""][0] == "LlamaForCausalLM" and "PreTrainedModel" in names.classes[""]
    assert names.module_params["model.layers.1.self_attn.o_proj"] == ("weight",)
    assert names.derived_parameters == () and names.tie_word_embeddings is False


def test_header_only_modules_without_classes(tmp_path: Path) -> None:
    model = _llama(tmp_path)
    names = read_checkpoint(tmp_path, classes=False)
    assert names.classes is None and "could not be checked" in names.classes_note
    with_params = {n for n, mod in model.named_modules() if n and any(True for _ in mod.parameters())}
    assert set(names.modules) == with_params  # param-less modules (rotary_emb) need the built model
    assert "model.rotary_emb" not in names.modules


def test_sharded_checkpoint_uses_the_index(tmp_path: Path) -> None:
    model = _llama(tmp_path, shard="5KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    names = read_checkpoint(tmp_path, classes=False)
    assert set(names.parameters) == set(model.state_dict())
    assert len(names.files) == len(set(index["weight_map"].values()))


@pytest.mark.parametrize("classes", [True, False])
def test_tied_embeddings_keep_lm_head(tmp_path: Path, classes: bool) -> None:
    model = _llama(tmp_path, tie=True)
    assert "lm_head.weight" not in read_tensor_names(tmp_path / "model.safetensors")
    names = read_checkpoint(tmp_path, classes=classes)
    assert names.tie_word_embeddings is True
    assert "lm_head" in names.modules and "lm_head.weight" in names.parameters
    assert names.derived_parameters == ("lm_head.weight",)
    assert set(names.parameters) == set(model.state_dict())


def test_truncated_data_gives_the_same_names(tmp_path: Path) -> None:
    _llama(tmp_path)
    before = read_checkpoint(tmp_path, classes=False)
    f = tmp_path / "model.safetensors"
    n = struct.unpack("<Q", f.read_bytes()[:8])[0]
    with open(f, "r+b") as fh:
        fh.truncate(8 + n)  # keep the header, drop every tensor byte
    after = read_checkpoint(tmp_path, classes=False)
    assert after.parameters == before.parameters and after.modules == before.modules


def test_huge_sparse_file_is_read_in_milliseconds(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    f = tmp_path / "model.safetensors"
    write_safetensors(f, ["model.a.weight", "model.b.weight"], data=False)
    try:
        with open(f, "r+b") as fh:
            fh.truncate(10 * 1024**3)
    except OSError:
        pytest.skip("the filesystem refuses a 10 GB sparse file")
    start = cpu_time()
    names = read_checkpoint(tmp_path, classes=False)
    assert cpu_time() - start < 0.5
    assert names.parameters == ("model.a.weight", "model.b.weight")


def test_module_classes_on_the_meta_device(tmp_path: Path) -> None:
    _llama(tmp_path)
    classes, note, direct = module_classes(tmp_path)
    assert classes is not None and "meta device" in note
    assert classes["model.layers.0"][0] == "LlamaDecoderLayer"
    assert direct["lm_head"] == ("weight",)
    none, why, _ = module_classes({"model_type": "no-such-model-type"})
    assert none is None and "no-such-model-type" in why and why.startswith("class-name targets could not")


def _corrupt_dir(tmp_path: Path, content: bytes) -> Path:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(content)
    return tmp_path


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x01\x02", "shorter than the 8-byte"),
        (struct.pack("<Q", 10_000) + b"{}", "header length says 10000"),
        (struct.pack("<Q", 200_000_000) + b"{}", "over the"),
        (struct.pack("<Q", 4) + b"[1] ", "not an object"),
        (struct.pack("<Q", 4) + b"{\"a ", "not JSON"),
        (struct.pack("<Q", 8) + b"{\"a\": 1}", "is not a tensor"),
    ],
)
def test_hostile_safetensors(tmp_path: Path, content: bytes, words: str) -> None:
    root = _corrupt_dir(tmp_path, content)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(root, classes=False)
    assert words in str(info.value) and "model.safetensors" in str(info.value)
    assert info.value.path.endswith("model.safetensors") and info.value.hint


def test_hostile_directories(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="has no config.json"):
        read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: config.json is not valid JSON"):
        read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"has no model.safetensors"):
        read_checkpoint(tmp_path)
    index = {"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                            "b.weight": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", ["a.weight"])
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(tmp_path)
    assert "model-00002-of-00002.safetensors" in str(info.value)
    assert info.value.path.endswith("model.safetensors.index.json")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        read_checkpoint(tmp_path)
