"""``oneshot(dataset="open_platypus" | "org/name" | "data.jsonl", ...)``: a dataset loaded by
name as llm-compressor 0.14 loads it (``transformers/data/*.py``): the hub dataset, split and
configuration each name stands for, its template (the strings below are copied from
llm-compressor's sources, not from recipe-spec's), and local files calibrating exactly as the
same text given as a list. No test reaches the network (conftest sets HF_HUB_OFFLINE)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")
pytest.importorskip("transformers")

import dropin_common as dc  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.oneshot import named_data  # noqa: E402
from recipe_spec.oneshot.inputs import TextOptions  # noqa: E402

TEXTS = ["hello world, a first line", "a second, longer line of text to tokenise", "third"]
RECIPE = """
quant_stage:
  quant_modifiers:
    GPTQModifier: {targets: [Linear], scheme: W4A16, ignore: [lm_head]}
"""


class _Hub:
    """``datasets.load_dataset`` standing in for the hub: records its arguments, returns ``table``."""

    def __init__(self, table: Any):
        self.table, self.calls = table, []

    def __call__(self, path: str, name: str | None = None, **kwargs: Any) -> Any:
        self.calls.append((path, name, kwargs))
        return self.table


def _named(monkeypatch: pytest.MonkeyPatch, rows: dict[str, list[Any]], name: str, tok: Any = None,
           **kwargs: Any) -> tuple[Any, _Hub]:
    hub = _Hub(datasets.Dataset.from_dict(rows))
    monkeypatch.setattr(datasets, "load_dataset", hub)
    loaded, text = named_data.named_input(name, tok, TextOptions(), dict(kwargs))
    assert text.text_column == "text"
    return loaded, hub


def test_open_platypus_is_llmcompressors_alpaca_template(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {"instruction": ["Add 2 and 3.", "Name a colour."], "input": ["", "Pick one."], "output": ["5", "red"]}
    loaded, hub = _named(monkeypatch, rows, "open_platypus", splits="train[:2]")
    assert hub.calls == [("garage-bAInd/Open-Platypus", None, {"split": "train[:2]"})]
    assert loaded["text"][0] == ("Below is an instruction that describes a task. Write a response that "
                                 "appropriately completes the request.\n\n### Instruction:\nAdd 2 and 3.\n\n"
                                 "### Response:\n5")
    assert loaded["text"][1] == ("Below is an instruction that describes a task, paired with an input that "
                                 "provides further context. Write a response that appropriately completes the "
                                 "request.\n\n### Instruction:\nName a colour.\n\n### Input:\nPick one.\n\n"
                                 "### Response:\nred")


@pytest.mark.parametrize("name, hub_id, config, rows, text", [
    ("gsm8k", "openai/gsm8k", "main", {"question": ["1+1?"], "answer": ["2"]}, "Question: 1+1?\nAnswer: 2"),
    ("cnn_dailymail", "cnn_dailymail", "3.0.0", {"article": ["A."], "highlights": ["B."]},
     "Article:\nA.\n\n### Summarization:\nB.\n"),
    ("evolcodealpaca", "theblackcat102/evol-codealpaca-v1", None, {"instruction": ["Sort."], "output": ["sorted()"]},
     "Below is an instruction that describes a programming task. Write a program that appropriately completes "
     "the request.\n\n### Instruction:\nSort.\n\n### Response:\nsorted()"),
    ("c4", "allenai/c4", None, {"text": ["plain"], "url": ["u"]}, "plain"),
    ("wikitext", "Salesforce/wikitext", None, {"text": ["wiki"]}, "wiki"),
])
def test_each_llmcompressor_name_loads_its_dataset_and_template(monkeypatch: pytest.MonkeyPatch, name: str,
                                                                hub_id: str, config: str | None,
                                                                rows: dict[str, list[str]], text: str) -> None:
    loaded, hub = _named(monkeypatch, rows, name, splits="validation")
    assert hub.calls == [(hub_id, config, {"split": "validation"})]
    assert loaded["text"] == [text]


def test_a_chat_dataset_uses_the_tokenizers_chat_template_or_llmcompressors(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = dc.tokenizer()
    rows = {"messages": [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]}
    own, _ = _named(monkeypatch, rows, "ultrachat_200k", tok)
    assert own["text"] == ["system: \nuser: hi\nassistant: yo\n"]  # the tokenizer's template, a system turn first
    tok.chat_template = None
    with pytest.warns(UserWarning, match="chat_template is not set"):
        loaded, hub = _named(monkeypatch, rows, "ultrachat", tok, splits="train")
    assert hub.calls[0][:2] == ("HuggingFaceH4/ultrachat_200k", None) and hub.calls[0][2]["split"] == "train_sft"
    # llm-compressor's default template (transformers renders it with trim_blocks), a system turn
    # put first: each turn "<|role|>\n" + content + eos, then the template's own newline
    assert loaded["text"] == ["<|system|>\n</s>\n<|user|>\nhi</s>\n<|assistant|>\nyo</s>\n"]


def test_a_users_preprocessing_func_replaces_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = _Hub(datasets.Dataset.from_dict({"question": ["q"], "answer": ["a"]}))
    monkeypatch.setattr(datasets, "load_dataset", hub)
    options = TextOptions(preprocessing_func=lambda row: {"text": row["question"].upper()})
    loaded, text = named_data.named_input("gsm8k", None, options, {})
    assert loaded["text"] == ["Q"] and text.preprocessing_func is None  # applied once, here


@pytest.mark.parametrize("splits, used", [("test[:5]", "test[:5]"), ({"calibration": "train[:8]"}, "train[:8]"),
                                          (["test", "train"], "test"), (None, None)])
def test_splits_in_each_of_llmcompressors_forms(monkeypatch: pytest.MonkeyPatch, splits: Any, used: str) -> None:
    _, hub = _named(monkeypatch, {"text": ["x"]}, "org/some-set", splits=splits, dataset_config_name="cfg")
    assert hub.calls == [("org/some-set", "cfg", {"split": used})]


@pytest.mark.parametrize("dataset, kwargs, says", [
    ("flickr", {}, "holds images"),
    ("some words with spaces", {}, "neither one of llm-compressor's dataset names"),
    ("org/not-cached-anywhere", {}, "cannot be loaded here.*HF_DATASETS_OFFLINE"),
    ("open_platypus", {"splits": {"train": "train"}}, "needs a 'calibration' entry"),
    (TEXTS, {"splits": "train"}, "applies to a dataset loaded by name"),
    (TEXTS, {"dataset_config_name": "en", "raw_kwargs": {"a": 1}}, "dataset_config_name, raw_kwargs applies to"),
    (TEXTS, {"dataset_path": "data.json"}, "dataset_path applies to a dataset loaded by name"),
    ("json", {"dataset_path": "/no/such/folder"}, "no such file or folder"),
    ("open_platypus", {"dataset_path": "/tmp"}, "goes with dataset='json' or 'csv'"),
])
def test_what_cannot_be_loaded_is_refused_before_the_model_changes(dataset: Any, kwargs: dict[str, Any],
                                                                   says: str) -> None:
    model = dc.llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=says):
        recipe_spec.oneshot(model=model, recipe=RECIPE, dataset=dataset, tokenizer=dc.tokenizer(), progress=False,
                            **kwargs)
    after = model.state_dict()
    assert before.keys() == after.keys() and all((before[k] == after[k]).all() for k in before)
    assert not any(hasattr(m, "weight_scale") for m in model.modules())


def _run(dataset: Any, **kwargs: Any) -> dict[str, Any]:
    model = dc.llama()
    recipe_spec.oneshot(model=model, recipe=RECIPE, dataset=dataset, tokenizer=dc.tokenizer(), max_seq_length=16,
                        num_calibration_samples=3, shuffle_calibration_samples=False, progress=False, **kwargs)
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("form", ["jsonl file", "csv file", "json folder", "saved to disk"])
def test_local_files_calibrate_as_the_same_text_given_as_a_list(form: str, tmp_path: pathlib.Path) -> None:
    want = _run(TEXTS)
    kwargs: dict[str, Any] = {}
    if form == "jsonl file":
        dataset = tmp_path / "cal.jsonl"
        dataset.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    elif form == "csv file":
        dataset = tmp_path / "cal.csv"
        datasets.Dataset.from_dict({"text": TEXTS}).to_csv(str(dataset))
    elif form == "json folder":  # llm-compressor's dataset="json" + dataset_path: train_*.json is the train split
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "train_part.json").write_text(json.dumps([{"body": t} for t in TEXTS]))
        (tmp_path / "data" / "test.json").write_text(json.dumps([{"body": "other"}]))
        dataset, kwargs = "json", {"dataset_path": str(tmp_path / "data"), "text_column": "body"}
    else:
        dataset = tmp_path / "saved"
        datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(dataset))
    got = _run(str(dataset) if form != "json folder" else dataset, **kwargs)
    assert got.keys() == want.keys()
    assert all((got[k] == want[k]).all() for k in want)
    assert any(k.endswith("weight_scale") for k in got)
