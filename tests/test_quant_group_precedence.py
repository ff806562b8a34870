"""Which config group quantizes a module that several groups' targets name: recipe-spec's
``QuantPlan.group_of`` against compressed-tensors 0.19's own ``apply_quantization_config`` on
a tiny Llama (an exact name before a ``re:`` pattern before a class name; a target string two
groups list belongs to the later one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

from recipe_spec import load  # noqa: E402
from recipe_spec.oneshot.shared.quant_plan import resolve_quant  # noqa: E402

RECIPE = """q_stage:
  q_modifiers:
    QuantizationModifier:
      ignore: [lm_head, model.layers.1.mlp.gate_proj]
      config_groups:
        by_class: {targets: [Linear], weights: {num_bits: 8, type: int, symmetric: true, strategy: channel}}
        by_regex: {targets: ["re:.*self_attn.*", "re:.*q_proj$"],
                   weights: {num_bits: 7, type: int, symmetric: true, strategy: channel}}
        by_name: {targets: [model.layers.0.self_attn.q_proj, model.layers.1.mlp.up_proj, "re:.*down_proj"],
                  weights: {num_bits: 6, type: int, symmetric: true, strategy: channel}}
        again_by_class: {targets: [Linear, model.layers.1.mlp.up_proj],
                         weights: {num_bits: 5, type: int, symmetric: false, strategy: channel}}
"""


def test_the_group_of_each_module_is_compressed_tensors_choice() -> None:
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config

    recipe = load(RECIPE)
    resolved = resolve_quant(recipe, recipe.modifiers[0], [])
    assert resolved is not None
    plan, _ = resolved
    config = plan.config
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4))
    apply_quantization_config(model, QuantizationConfig.model_validate(config))
    bits = {name: g["weights"]["num_bits"] for name, g in config["config_groups"].items()}
    theirs, ours = {}, {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):  # oneshot() quantizes Linear layers
            continue
        scheme = getattr(module, "quantization_scheme", None)
        theirs[name] = None if scheme is None else scheme.weights.num_bits
        group = plan.group_of(name, [c.__name__ for c in type(module).__mro__])
        ours[name] = None if group is None else bits[group.name]
    assert ours == theirs
    # the cases the ranking decides, by hand from compressed-tensors' rule
    assert theirs["model.layers.0.self_attn.q_proj"] == 6  # exact name beats both patterns and the class
    assert theirs["model.layers.1.self_attn.q_proj"] == 7  # re:.*q_proj$ sorts before re:.*self_attn.*
    assert theirs["model.layers.0.mlp.down_proj"] == 6  # a pattern beats the class
    assert theirs["model.layers.1.mlp.up_proj"] == 5  # the same name in two groups: the later group
    assert theirs["model.layers.0.mlp.gate_proj"] == 5  # "Linear" in two groups: the later group
    assert theirs["model.layers.1.mlp.gate_proj"] is None and theirs["lm_head"] is None
