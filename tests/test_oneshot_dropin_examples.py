"""Three of llm-compressor 0.14's example scripts, step for step as they are written, with the
import changed to ``recipe_spec``, the model id a local tiny Llama folder and
``load_dataset`` a few local chat rows (docs/llmcompressor-examples.md lists every example):
``quantization_w4a16/llama3_example.py`` (GPTQ W4A16 on tokenised chat data),
``quantization_w8a8_fp8/llama3_example.py`` (FP8 dynamic, data-free) and
``quantization_w8a8_int8/llama3_example.py`` (SmoothQuant then GPTQ W8A8). Each saved folder
is loaded back with transformers and its ``quantization_config`` checked against
compressed-tensors' own preset (``preset_name_to_scheme``), not against the code under test."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
pytest.importorskip("tokenizers")

import dropin_common as dc  # noqa: E402

NUM_CALIBRATION_SAMPLES = 4
MAX_SEQUENCE_LENGTH = 32


@pytest.fixture()
def MODEL_ID(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: N802 - the scripts' name
    monkeypatch.chdir(tmp_path)
    return str(dc.checkpoint(tmp_path / "tiny-llama"))


def load_dataset(*_: Any, **__: Any) -> dc.Table:
    """The scripts' ``load_dataset(DATASET_ID, split=...)``: local chat rows."""
    return dc.Table.from_dict({"messages": [[{"role": "user", "content": t}, {"role": "assistant", "content": t[::-1]}]
                                            for t in dc.TEXTS]})


def _chat_tokenised(tokenizer: Any) -> Any:
    """The scripts' data steps: shuffle, chat template to text, tokenise without special tokens."""
    ds = load_dataset("HuggingFaceH4/ultrachat_200k", split=f"train_sft[:{NUM_CALIBRATION_SAMPLES}]")
    ds = ds.shuffle(seed=42)

    def preprocess(example: dict[str, Any]) -> dict[str, Any]:
        return {"text": tokenizer.apply_chat_template(example["messages"], tokenize=False)}

    ds = ds.map(preprocess)

    def tokenize(sample: dict[str, Any]) -> Any:
        return tokenizer(sample["text"], padding=False, max_length=MAX_SEQUENCE_LENGTH, truncation=True,
                         add_special_tokens=False)

    return ds.map(tokenize, remove_columns=ds.column_names)


def _generate(model: Any, tokenizer: Any) -> list[int]:
    from compressed_tensors.offload import dispatch_model

    dispatch_model(model)
    sample = tokenizer("Hello my name is", return_tensors="pt")
    sample = {key: value.to(model.device) for key, value in sample.items()}
    output = model.generate(**sample, max_new_tokens=20)
    print(tokenizer.decode(output[0]))
    prompt = sample["input_ids"][0].tolist()
    assert output[0].tolist()[:len(prompt)] == prompt and len(output[0]) > len(prompt)
    return list(output[0].tolist())


def _check_saved(folder: str, preset: str) -> dict[str, Any]:
    """The folder loads in transformers, and its config group is compressed-tensors' preset."""
    from compressed_tensors.quantization import preset_name_to_scheme

    config = transformers.AutoConfig.from_pretrained(folder).quantization_config
    q = config if isinstance(config, dict) else config.to_dict()
    (group,) = q["config_groups"].values()
    want = preset_name_to_scheme(preset, ["Linear"]).model_dump(mode="json")
    for part in ("weights", "input_activations"):
        if want[part] is None:
            assert group.get(part) is None
            continue
        for key in ("num_bits", "type", "symmetric", "strategy", "group_size", "dynamic"):
            assert group[part][key] == want[part][key], (part, key)
    assert group["targets"] == ["Linear"] and q["ignore"] == ["lm_head"]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert torch.isfinite(model(torch.tensor([[1, 40, 41, 42]])).logits).all()
    assert os.path.exists(os.path.join(folder, "tokenizer.json"))
    return q


def test_quantization_w4a16_llama3_example(MODEL_ID: str) -> None:  # noqa: N803
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe_spec import oneshot
    from recipe_spec.modifiers.gptq import GPTQModifier

    model = AutoModelForCausalLM.from_pretrained(MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
    ds = _chat_tokenised(tokenizer)
    recipe = GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=MAX_SEQUENCE_LENGTH,
            num_calibration_samples=NUM_CALIBRATION_SAMPLES)
    assert _generate(model, tokenizer)[:3] == [1, dc.char_id("H"), dc.char_id("e")]
    SAVE_DIR = MODEL_ID.rstrip("/").split("/")[-1] + "-W4A16-G128"  # noqa: N806
    model.save_pretrained(SAVE_DIR, save_compressed=True)
    tokenizer.save_pretrained(SAVE_DIR)
    assert _check_saved(SAVE_DIR, "W4A16")["format"] == "pack-quantized"


def test_quantization_w8a8_fp8_llama3_example(MODEL_ID: str) -> None:  # noqa: N803
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe_spec import oneshot
    from recipe_spec.modifiers.quantization import QuantizationModifier

    model = AutoModelForCausalLM.from_pretrained(MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
    recipe = QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])
    oneshot(model=model, recipe=recipe)
    _generate(model, tokenizer)
    SAVE_DIR = MODEL_ID.rstrip("/").split("/")[-1] + "-FP8-Dynamic"  # noqa: N806
    model.save_pretrained(SAVE_DIR)
    tokenizer.save_pretrained(SAVE_DIR)
    assert _check_saved(SAVE_DIR, "FP8_DYNAMIC")["format"] == "float-quantized"


def test_quantization_w8a8_int8_llama3_example(MODEL_ID: str) -> None:  # noqa: N803
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe_spec import oneshot
    from recipe_spec.modifiers.gptq import GPTQModifier
    from recipe_spec.modifiers.transform.smoothquant import SmoothQuantModifier

    model = AutoModelForCausalLM.from_pretrained(MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
    ds = _chat_tokenised(tokenizer)
    norm = model.model.layers[0].post_attention_layernorm.weight.clone()
    recipe = [
        SmoothQuantModifier(smoothing_strength=0.8),
        GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"]),
    ]
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=MAX_SEQUENCE_LENGTH,
            num_calibration_samples=NUM_CALIBRATION_SAMPLES)
    assert not torch.equal(model.model.layers[0].post_attention_layernorm.weight, norm)  # smoothed
    _generate(model, tokenizer)
    SAVE_DIR = MODEL_ID.rstrip("/").split("/")[-1] + "-W8A8-Dynamic-Per-Token"  # noqa: N806
    model.save_pretrained(SAVE_DIR, save_compressed=True)
    tokenizer.save_pretrained(SAVE_DIR)
    assert _check_saved(SAVE_DIR, "W8A8")["format"] == "int-quantized"
