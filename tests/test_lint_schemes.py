"""Lint of a recipe written for another naming scheme (P013): SparseML's model-zoo ResNet-50
recipes (``sections.N.M``) against torchvision's ResNet-50 (``layerN.M``).

The model is ``tests/fixtures/lint/torchvision-resnet50.params.json``: the names and shapes of
``torchvision.models.resnet50()`` (torchvision 0.28.0), written by ``recipe-spec params``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO
from testdata import CORPUS

import recipe_spec
from recipe_spec.cli import main
from recipe_spec.diagnostics.base import RecipeError
from recipe_spec.lint import lint
from recipe_spec.params.manifest import read_manifest
from recipe_spec.params.schemes import infer_mapping, scheme_label

TORCHVISION = REPO / "tests" / "fixtures" / "lint" / "torchvision-resnet50.params.json"
RECIPES = CORPUS / "real"
SPARSEML_RESNET50 = [
    "sparseml__integrations__old-examples__pytorch__recipes__resnet50-pruned.md",
    "sparseml__integrations__old-examples__pytorch__recipes__resnet50-pruned_quant.md",
    "sparseml__integrations__old-examples__pytorch__recipes__resnet50-imagenette-pruned.md",
]

# The two layouts, from their definitions: SparseML's ResNet-50 puts torchvision's layer1..4
# in sections.0..3 and calls a block's projection shortcut identity.conv (torchvision:
# downsample.0); its head is classifier.fc (torchvision: fc).
BY_HAND = {
    "sections.0.0.conv1.weight": "layer1.0.conv1.weight",
    "sections.0.0.identity.conv.weight": "layer1.0.downsample.0.weight",
    "sections.2.5.conv2.weight": "layer3.5.conv2.weight",
    "sections.3.0.identity.conv.weight": "layer4.0.downsample.0.weight",
    "sections.3.2.conv3.weight": "layer4.2.conv3.weight",
    "classifier.fc.weight": "fc.weight",
}


@pytest.fixture(scope="module")
def torchvision() -> tuple[str, list]:
    return read_manifest(TORCHVISION)


def _recipe_names(path: Path) -> list[str]:
    recipe = recipe_spec.load(path)
    out = []
    for m in recipe.modifiers:
        params = m.args.get("params")
        if isinstance(params, (list, tuple)):
            out += [p for p in params if isinstance(p, str) and not p.startswith("__")]
    return out


@pytest.mark.parametrize("name", SPARSEML_RESNET50)
def test_one_finding_with_the_mapping(name: str, torchvision: tuple[str, list]) -> None:
    framework, records = torchvision
    found = lint(RECIPES / name, records, framework)
    codes = [d.code for d in found]
    assert "P001" not in codes, "the names that miss are told once, not one by one"
    (scheme,) = [d for d in found if d.code == "P013"]
    assert scheme.severity.value == "error"
    assert "SparseML's model-zoo ResNet/MobileNet layout (sections.N.M)" in scheme.message
    assert "torchvision's ResNet layout (layerN.M)" in scheme.message
    assert "sections.N.M -> layer(N+1).M" in scheme.hint and "identity.conv -> downsample.0" in scheme.hint
    missed = len(_recipe_names(RECIPES / name))
    assert scheme.message.startswith(f"{missed} of the recipe's {missed} parameter names")
    assert f"fits {missed} of the {missed} names" in scheme.hint


def test_the_mapping_lands_on_torchvisions_own_weights(torchvision: tuple[str, list]) -> None:
    _, records = torchvision
    names = _recipe_names(RECIPES / SPARSEML_RESNET50[0])
    assert len(names) == 52
    mapping = infer_mapping(names, [r.name for r in records], preferred=[r.name for r in records if r.prunable])
    assert set(mapping.mapped) == set(names)
    # every convolution of torchvision's ResNet-50 but the stem: what the recipe prunes
    convs = {r.name for r in records if r.layer_type == "Conv2d"}
    assert set(mapping.mapped.values()) == convs - {"conv1.weight"}
    assert len(set(mapping.mapped.values())) == 52
    by_hand = infer_mapping(list(BY_HAND) + names, [r.name for r in records],
                            preferred=[r.name for r in records if r.prunable]).mapped
    assert {k: by_hand[k] for k in BY_HAND} == BY_HAND


def test_a_few_typos_stay_p001(torchvision: tuple[str, list]) -> None:
    framework, records = torchvision
    good = [r.name for r in records if r.prunable][:8]
    params = good + ["layer1.0.conv9.weight", "layer9.0.conv1.weight"]
    text = ("modifiers:\n  - !GMPruningModifier\n    params: " + json.dumps(params) + "\n"
            "    init_sparsity: 0.05\n    final_sparsity: 0.8\n    start_epoch: 0\n    end_epoch: 10\n"
            "    update_frequency: 1\n")
    codes = [d.code for d in lint(text, records, framework)]
    assert codes.count("P001") == 2 and "P013" not in codes


def test_scheme_labels() -> None:
    assert scheme_label(["bert.encoder.layer.0.attention.self.query.weight"]).startswith("Hugging Face's BERT")
    assert scheme_label(["model.layers.3.mlp.up_proj.weight"]) == "Hugging Face's decoder layout (model.layers.N)"
    mapping = infer_mapping(
        [f"bert.encoder.layer.{i}.output.dense.weight" for i in range(4)],
        [f"encoder.layer.{i}.output.dense.weight" for i in range(4)],
    )
    assert str(mapping) == "bert.X -> X" and len(mapping.mapped) == 4


def test_modify_refuses_and_the_cli_reports_once(torchvision: tuple[str, list], capsys: pytest.CaptureFixture[str]) -> None:
    from recipe_spec.runtime.preflight import check_recipe_fits

    framework, records = torchvision
    recipe = recipe_spec.load(RECIPES / SPARSEML_RESNET50[0])
    with pytest.raises(RecipeError) as err:
        check_recipe_fits(recipe, records, framework)
    assert [d.code for d in err.value.diagnostics] == ["P013"]
    assert main(["lint", str(RECIPES / SPARSEML_RESNET50[0]), "--params", str(TORCHVISION), "--format", "json"]) == 1
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert [d["code"] for d in report["diagnostics"]] == ["P013"]
