"""``recipe_spec.oneshot`` on PyTorch changes nothing before everything is checked, and a run
that fails leaves the model as it was.

Every refusal path (arguments, data, recipe against the model, a failure during the run, a
failure while the folder is written) is run on a fresh tiny Llama; the model's parameters and
buffers (bit for bit), each module's parameter names and public attributes (what attaching
quantization adds) and one forward output are compared before and after.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import recipe_spec  # noqa: E402
from recipe_spec import RecipeError  # noqa: E402

GPTQ = ("q_stage:\n  q_modifiers:\n    GPTQModifier: {scheme: W4A16, targets: [Linear], ignore: [lm_head], "
        "block_size: 16}\n")
SPARSEGPT = "s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, targets: [Linear], ignore: [lm_head]}\n"
SMOOTH_W8A8 = ("q_stage:\n  q_modifiers:\n    SmoothQuantModifier: {smoothing_strength: 0.8}\n"
               "    QuantizationModifier: {scheme: W8A8, targets: [Linear], ignore: [lm_head]}\n")
RECIPES = {"gptq": GPTQ, "sparsegpt": SPARSEGPT}
VOCAB, POSITIONS = 64, 64


def _model(intermediate: int = 256) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=intermediate,
                                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                      max_position_embeddings=POSITIONS)
    return transformers.LlamaForCausalLM(config).eval()


def _samples(n: int = 4, length: int = 16) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(1)
    return [{"input_ids": torch.randint(0, VOCAB, (length,), generator=g),
             "attention_mask": torch.ones(length, dtype=torch.long)} for _ in range(n)]


PROBE = torch.arange(8).reshape(1, 8) % VOCAB


class Snapshot:
    """The model's state, its modules' shells and one forward output."""

    def __init__(self, model: Any):
        self.tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.shells = {n: (sorted(m._parameters), sorted(m._buffers), sorted(k for k in m.__dict__ if not k.startswith("_")),
                           len(m._forward_hooks) + len(m._forward_pre_hooks))
                       for n, m in model.named_modules()}
        with torch.no_grad():
            self.logits = model(PROBE).logits.clone()

    def assert_same(self, model: Any) -> None:
        after = Snapshot(model)
        changed = [n for n in self.shells if self.shells[n] != after.shells.get(n)]
        assert not changed, f"modules changed shape: {changed[:3]}"
        assert self.tensors.keys() == after.tensors.keys()
        differ = [k for k in self.tensors if not torch.equal(self.tensors[k], after.tensors[k])]
        assert not differ, f"tensors changed: {differ[:3]}"
        assert torch.equal(self.logits, after.logits)
        assert model.training is False


def _refused(recipe: str, exc: type[BaseException], match: str, model: Any = None, **kwargs: Any) -> None:
    model = model if model is not None else _model()
    before = Snapshot(model)
    kwargs.setdefault("dataset", _samples())
    with pytest.raises(exc, match=match):
        recipe_spec.oneshot(model=model, recipe=recipe, **kwargs)
    before.assert_same(model)


BAD_DATA = {
    "id outside the vocabulary": ([{"input_ids": torch.tensor([1, 2, VOCAB])}], ValueError, "outside the model's vocabulary of 64"),
    "negative id": ([{"input_ids": torch.tensor([1, -2, 3])}], ValueError, "token id -2 is negative"),
    "float ids": ([{"input_ids": torch.tensor([1.0, 2.0])}], TypeError, "token ids are integers"),
    "list of float ids": ([{"input_ids": [1.5, 2.0]}], TypeError, "token ids are integers"),
    "empty sample": ([{"input_ids": torch.tensor([], dtype=torch.long)}], ValueError, "is empty"),
    "mask longer than ids": ([{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1, 1]}], ValueError,
                             "attention_mask has shape \\[4\\] and input_ids \\[3\\]"),
    "mask shorter than ids": ([{"input_ids": [1, 2, 3], "attention_mask": [1, 1]}], ValueError, "one value per token"),
    "mask of other values": ([{"input_ids": [1, 2, 3], "attention_mask": [1, 2, 1]}], ValueError, "other than 0 and 1"),
    "longer than the positions": ([{"input_ids": list(range(POSITIONS)) + [1]}], ValueError, "more than the model's 64 positions"),
    "a text column left in": ([{"input_ids": [1, 2], "text": "hi"}], TypeError, "'text' is str"),
    "a later sample is bad": ([*_samples(3), {"input_ids": [1, 99]}], ValueError, "calibration sample 3"),
    "a DataLoader of tuples": (torch.utils.data.DataLoader([(torch.tensor([1, 2]),)], batch_size=1), TypeError,
                               "batch 0 of the DataLoader is list"),
    "a DataLoader with an id outside the vocabulary": (
        torch.utils.data.DataLoader([{"input_ids": torch.tensor([1, 200])}], batch_size=1), ValueError,
        "calibration batch 0: token id 200"),
}


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("case", BAD_DATA)
def test_bad_calibration_data_is_refused_before_the_model_changes(recipe: str, case: str) -> None:
    data, exc, match = BAD_DATA[case]
    _refused(RECIPES[recipe], exc, match, dataset=data)


BAD_ARGUMENTS = {
    "num_calibration_samples as text": ({"num_calibration_samples": "4"}, TypeError, "num_calibration_samples=4"),
    "batch_size as a float": ({"batch_size": 2.5}, TypeError, "batch_size must be an int"),
    "batch_size zero": ({"batch_size": 0}, TypeError, "at least 1"),
    "num_calibration_samples as a bool": ({"num_calibration_samples": True}, TypeError, "not bool"),
    "shuffle as text": ({"shuffle_calibration_samples": "no"}, TypeError, "True or False"),
    "unknown sequential_targets": ({"sequential_targets": ["NoSuchLayer"]}, ValueError,
                                   "'NoSuchLayer'.*no such class or module.*LlamaDecoderLayer"),
    "sequential_targets as a number": ({"sequential_targets": 5}, TypeError, "sequential_targets must be a name"),
    "seed as a float": ({"seed": 1.5}, TypeError, "seed must be an int"),
    "output_dir as a number": ({"output_dir": 5}, TypeError, "output_dir must be a folder path"),
    "recipe_args as a number": ({"recipe_args": 5}, TypeError, "recipe_args must be a mapping"),
    "progress as a number": ({"progress": 5}, TypeError, "progress must be a function"),
    "compat as a number": ({"compat": 5}, TypeError, "compat must be a string"),
    "save_compressed as text": ({"save_compressed": "no"}, TypeError, "save_compressed must be True or False"),
    "preserve_masks as text": ({"preserve_masks": "x"}, TypeError, "preserve_masks must be True or False"),
    "dataset as a number": ({"dataset": 5}, TypeError, "dataset must be tokenised samples"),
    "sequential_targets that do not chain": ({"sequential_targets": ["Linear"]}, ValueError,
                                             r"k_proj is not fed the output of model.layers.0.self_attn.q_proj"),
    "dataset as text": ({"dataset": "some text"}, ValueError, "neither one of llm-compressor's dataset names"),
    "max_seq_length as text": ({"max_seq_length": "x"}, TypeError, "max_seq_length must be a positive int"),
    "max_seq_length as a float": ({"max_seq_length": 2.5}, TypeError, "max_seq_length must be a positive int"),
    "text_column as a number": ({"text_column": 5}, TypeError, "text_column must be the name"),
    "concatenate_data as text": ({"concatenate_data": "yes"}, TypeError, "concatenate_data must be True or False"),
    "pad_to_max_length as text": ({"pad_to_max_length": "no"}, TypeError, "pad_to_max_length must be True or False"),
    "empty sequential_targets": ({"sequential_targets": []}, ValueError, "sequential_targets is empty"),
    "output_dir with a NUL": ({"output_dir": "/tmp/a\0b"}, OSError, "NUL character"),
    "log_dir a file": ({"log_dir": __file__}, ValueError, "log_dir=.*cannot be made"),
}


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_the_model_changes(recipe: str, case: str) -> None:
    kwargs, exc, match = BAD_ARGUMENTS[case]
    _refused(RECIPES[recipe], exc, match, **kwargs)


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_non_finite_weight_in_a_later_layer_is_refused_before_the_first_changes(recipe: str) -> None:
    model = _model()
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="non-finite values.*model.layers.1.mlp.up_proj.weight"):
        recipe_spec.oneshot(model=model, recipe=RECIPES[recipe], dataset=_samples())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k], ) or k.endswith("up_proj.weight") for k in before)
    assert torch.isnan(after["model.layers.1.mlp.up_proj.weight"][0, 0])
    assert getattr(model.model.layers[0].self_attn.q_proj, "quantization_scheme", None) is None


def test_an_nm_structure_a_later_layer_cannot_take_is_refused_before_the_first_changes() -> None:
    """down_proj's 200 inputs do not split into groups of 16; q_proj's 128 do: nothing runs."""
    recipe = ("s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5, mask_structure: '8:16', "
              "targets: [Linear], ignore: [lm_head]}\n")
    _refused(recipe, RecipeError, "P004.*8:16.*model.layers.0.mlp.down_proj \\(in 200\\)",
             model=_model(intermediate=200))


def test_an_already_quantized_model_is_not_quantized_again() -> None:
    model = _model()
    recipe_spec.oneshot(model=model, recipe=GPTQ, dataset=_samples())
    _refused(GPTQ, RecipeError, "B001.*already quantized", model=model)
    _refused(SPARSEGPT, RecipeError, "B001.*already quantized", model=model)


def test_a_model_on_the_meta_device_is_refused() -> None:
    with torch.device("meta"):
        model = _model()
    with pytest.raises(ValueError, match="meta device.*load the checkpoint"):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=_samples())


def _failing_after(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: int) -> list[int]:
    """``module.name`` raises on its ``calls``-th call (the earlier ones run)."""
    real, seen = getattr(module, name), []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) >= calls:
            raise RuntimeError("the solve failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


@pytest.mark.parametrize("recipe,folder,where", [(SPARSEGPT, "sparsegpt", "sparsegpt_prune"),
                                                 (GPTQ, "gptq", "record_quantized"),
                                                 (SMOOTH_W8A8, "rtn", "record_quantized")])
def test_a_failure_during_the_run_puts_the_model_back(monkeypatch: pytest.MonkeyPatch, recipe: str,
                                                      folder: str, where: str) -> None:
    """The ninth layer's solve fails: the eight before it (and, for quantization, every
    scheme attached; for SmoothQuant, the smoothed norms) are undone."""
    import importlib

    seen = _failing_after(monkeypatch, importlib.import_module(f"recipe_spec.oneshot.{folder}"), where, 9)
    _refused(recipe, RuntimeError, "the solve failed")
    assert len(seen) == 9


def test_restore_on_error_false_leaves_the_changed_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec.oneshot import sparsegpt

    _failing_after(monkeypatch, sparsegpt, "sparsegpt_prune", 3)
    model = _model()
    q_proj = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    with pytest.raises(RuntimeError):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=_samples(), restore_on_error=False)
    assert not torch.equal(model.model.layers[0].self_attn.q_proj.weight, q_proj)


def test_a_disk_that_fills_while_saving_puts_the_model_back_and_leaves_no_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """compressed-tensors has packed every quantized module when the write fails."""
    model = _model()
    real = type(model).save_pretrained

    def full(self: Any, folder: str, *args: Any, **kwargs: Any) -> None:
        real(self, folder, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(model), "save_pretrained", full)
    before = Snapshot(model)
    with pytest.raises(OSError, match="No space left"):
        recipe_spec.oneshot(model=model, recipe=GPTQ, dataset=_samples(), output_dir=tmp_path / "out")
    before.assert_same(model)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_run_after_a_refusal_gives_the_result_of_a_fresh_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model put back runs as if nothing had happened: the same weights as on a new copy."""
    from recipe_spec.oneshot import gptq

    model = _model()
    with monkeypatch.context() as patch:
        _failing_after(patch, gptq, "record_quantized", 5)
        with pytest.raises(RuntimeError):
            recipe_spec.oneshot(model=model, recipe=GPTQ, dataset=_samples())
    recipe_spec.oneshot(model=model, recipe=GPTQ, dataset=_samples())
    fresh = _model()
    recipe_spec.oneshot(model=fresh, recipe=GPTQ, dataset=_samples())
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_a_model_of_no_backend_is_refused_naming_oneshot() -> None:
    with pytest.raises(TypeError, match="oneshot\\(\\) got a int, which is not a model of any backend"):
        recipe_spec.oneshot(model=5, recipe=SPARSEGPT, dataset=_samples())


def test_ids_of_any_integer_type_give_the_same_run() -> None:
    """uint8 and int32 ids are the same token ids as int64 ones (an embedding takes int64)."""
    results = []
    for dtype in (torch.int64, torch.int32, torch.uint8):
        model = _model()
        data = [{k: v.to(dtype) if k == "input_ids" else v for k, v in s.items()} for s in _samples()]
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=data)
        results.append(model.model.layers[1].mlp.down_proj.weight.detach().clone())
    assert float((results[0] == 0).float().mean()) == pytest.approx(0.5, abs=1e-3)
    assert all(torch.equal(results[0], r) for r in results[1:])


def test_the_manager_checks_as_oneshot_does() -> None:
    """``ScheduledModifierManager.apply(model, calibration=...)``: the same data checks, the
    model untouched, and an option it does not take named."""
    manager = recipe_spec.ScheduledModifierManager.from_yaml(SPARSEGPT)
    model = _model()
    before = Snapshot(model)
    with pytest.raises(ValueError, match="calibration sample 0: token id -1 is negative"):
        manager.apply(model, calibration=[{"input_ids": [1, -1]}])
    with pytest.raises(TypeError, match="takes no option 'max_seq_length'.*num_calibration_samples"):
        manager.apply(model, calibration=_samples(), max_seq_length=8)
    before.assert_same(model)


def test_a_modifier_that_needs_data_in_the_datafree_pipeline_is_refused_before_attaching() -> None:
    _refused(GPTQ, ValueError, "GPTQModifier .* needs calibration data, which the datafree pipeline",
             pipeline="datafree")


def test_a_batch_size_beside_a_dataloader_is_refused_not_ignored() -> None:
    loader = torch.utils.data.DataLoader(_samples(), batch_size=2)
    _refused(SPARSEGPT, ValueError, "batch_size=4 with a DataLoader.*its batch_size 2", dataset=loader, batch_size=4)


def test_numpy_integer_counts_run_as_ints() -> None:
    """``num_calibration_samples`` and ``batch_size`` as NumPy integers run as the same ints."""
    np = pytest.importorskip("numpy")
    results = []
    for count, batch in ((3, 1), (np.int64(3), np.int32(1))):
        model = _model()
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT, dataset=_samples(), num_calibration_samples=count,
                            batch_size=batch, shuffle_calibration_samples=False)
        results.append(model.model.layers[1].mlp.down_proj.weight.detach().clone())
    assert float((results[0] == 0).float().mean()) == pytest.approx(0.5, abs=1e-3)
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("value,match", [("group", "M008.*actorder 'group' was removed"),
                                         ("dynamic", "M008.*actorder 'dynamic' was removed"),
                                         ("true", "M008.*actorder: true meant 'group'"),
                                         ("sideways", "M006.*'sideways' is not one of")])
def test_a_modifier_actorder_compressed_tensors_refuses_is_located(value: str, match: str) -> None:
    """GPTQModifier's own ``actorder`` is read as compressed-tensors 0.19 reads it: the values it
    refuses are a located error at the value (line 6), not pydantic's error from inside the run."""
    recipe = ("q_stage:\n  q_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n      targets: [Linear]\n"
              f"      actorder: {value}\n      ignore: [lm_head]\n")
    _refused(recipe, RecipeError, "<string>:6:.*" + match)


def _tied() -> Any:
    model = _model()
    model.lm_head.weight = model.model.embed_tokens.weight
    model.config.tie_word_embeddings = True
    return model


@pytest.mark.parametrize("recipe", [GPTQ.replace(", ignore: [lm_head]", ""),
                                    SPARSEGPT.replace(", ignore: [lm_head]", "")], ids=["gptq", "sparsegpt"])
def test_a_tied_head_is_untied_before_it_changes(recipe: str, tmp_path: Any) -> None:
    """A recipe that compresses ``lm_head`` of a model whose head shares the embedding's weight
    changes the head alone: the embedding keeps its values bit for bit, and the config and the
    saved folder say the embeddings are untied (llm-compressor's ``untie_word_embeddings``)."""
    model = _tied()
    embedding = model.model.embed_tokens.weight.detach().clone()
    recipe_spec.oneshot(model=model, recipe=recipe, dataset=_samples(), output_dir=str(tmp_path / "out"))
    assert torch.equal(model.model.embed_tokens.weight, embedding)
    assert model.config.tie_word_embeddings is False
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert reloaded.config.tie_word_embeddings is False
    assert torch.equal(reloaded.model.embed_tokens.weight, embedding)
    if "GPTQ" in recipe:
        assert {"weight_packed", "weight_scale"} <= {n for n, _ in reloaded.lm_head.named_parameters()}
    else:
        head = reloaded.lm_head.weight
        assert not torch.equal(head, embedding) and float((head == 0).float().mean()) == pytest.approx(0.5, abs=1e-3)


def test_a_failed_run_ties_the_head_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's solve fails after it was untied and pruned: the head shares the embedding's
    weight again (the same Parameter) and the config says so, the values as they were."""
    from recipe_spec.oneshot import sparsegpt

    model = _tied()
    before = Snapshot(model)
    _failing_after(monkeypatch, sparsegpt, "sparsegpt_prune", 15)  # 14 decoder Linears, then the head
    with pytest.raises(RuntimeError, match="the solve failed"):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT.replace(", ignore: [lm_head]", ""), dataset=_samples())
    before.assert_same(model)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.tie_word_embeddings is True


@pytest.mark.parametrize("surface", ["oneshot", "manager"])
def test_an_endless_generator_is_read_to_its_first_samples(surface: str) -> None:
    """A dataset without a length (a generator that never ends) is read to its first
    ``num_calibration_samples`` samples, not forever: the run equals the run of those samples
    given as a list."""
    import itertools

    first = _samples(3)

    def endless() -> Any:
        for i in itertools.count():
            yield first[i % 3] if i < 3 else {"input_ids": torch.tensor([i % VOCAB] * 5)}

    results = []
    for data in (endless(), first):
        model = _model()
        if surface == "oneshot":
            recipe_spec.oneshot(model=model, recipe=GPTQ, dataset=data, num_calibration_samples=3,
                                shuffle_calibration_samples=False)
        else:
            recipe_spec.ScheduledModifierManager.from_yaml(GPTQ).apply(
                model, calibration=data, num_calibration_samples=3, shuffle_calibration_samples=False)
        results.append({k: v.clone() for k, v in model.state_dict().items()})
    assert results[0].keys() == results[1].keys()
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])


def test_a_model_with_uninitialised_lazy_modules_is_refused() -> None:
    """A LazyLinear that has not run yet has no weight to compress: refused, naming it."""
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.LazyLinear(16), torch.nn.Linear(16, VOCAB))
    with pytest.raises(ValueError, match=r"lazy modules are not initialised \(1.weight"):
        recipe_spec.oneshot(model=model, recipe=SPARSEGPT.replace(", ignore: [lm_head]", ""), dataset=_samples())
    assert isinstance(model[1].weight, torch.nn.parameter.UninitializedParameter)


@pytest.mark.parametrize("recipe,exc,match", [
    ([], ValueError, "the recipe is an empty list"),
    ({"q_stage": {"q_modifiers": {}}}, TypeError, r"not dict \(write the mapping as YAML text"),
    (GPTQ.encode(), TypeError, r"not bytes \(decode it"),
], ids=["empty list", "mapping", "bytes"])
def test_a_recipe_of_another_form_is_refused_with_what_to_give(recipe: Any, exc: type, match: str) -> None:
    _refused(recipe, exc, match)
