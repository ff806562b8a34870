"""``oneshot(output_dir=...)`` of a quantization recipe on a model compressed-tensors cannot
save (no ``save_pretrained``): refused before anything changes, located at the quantization
modifier, with what to do; nothing is written."""

from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")

import recipe_spec  # noqa: E402
from recipe_spec.diagnostics.base import RecipeError  # noqa: E402

RECIPE = """q_stage:
  q_modifiers:
    QuantizationModifier:
      scheme: FP8_DYNAMIC
      targets: [Linear]
"""


def test_a_model_without_save_pretrained_is_refused_before_any_change(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = tmp_path / "out"
    with pytest.raises(RecipeError) as err:
        recipe_spec.oneshot(model=model, recipe=RECIPE, output_dir=out)
    (d,) = err.value.diagnostics
    assert d.code == "B001" and (d.line, d.column) == (3, 5)
    assert "save_pretrained" in d.message and "Sequential" in d.message and "output_dir" in d.hint
    assert not out.exists()
    state = model.state_dict()
    assert set(state) == set(before) and all(torch.equal(v, before[k]) for k, v in state.items())
    assert not any(hasattr(m, "quantization_scheme") for m in model.modules())
    recipe_spec.oneshot(model=model, recipe=RECIPE)  # without output_dir it runs
    assert model[0].weight_scale.shape == (16, 1)
