"""recipe-spec's one model of compressed-tensors (:mod:`recipe_spec.compressed_tensors`) checked
field for field against compressed-tensors itself (the release llm-compressor 0.14 pins):
``QuantizationArgs`` and ``QuantizationScheme`` fields, their order and defaults, the preset
names that release has and each preset's contents."""

from __future__ import annotations

import pytest

ct = pytest.importorskip("compressed_tensors")

from recipe_spec.compressed_tensors import ARGS_FIELDS, PRESETS, SCHEME_FIELDS  # noqa: E402
from recipe_spec.compressed_tensors.fields import ARG_DEFAULTS  # noqa: E402
from recipe_spec.stage_dialect.quant_args import fields_in, preset_names  # noqa: E402
from recipe_spec.stage_dialect.versions import Version  # noqa: E402

NEWEST = ("llmcompressor", Version.parse("0.14"))


def test_the_pinned_release_is_the_one_modelled() -> None:
    assert ct.__version__.startswith("0.19")


def test_quantization_args_fields_their_order_and_defaults() -> None:
    from compressed_tensors.quantization import QuantizationArgs

    theirs = QuantizationArgs.model_fields
    assert [f.name for f in ARGS_FIELDS] == list(theirs)
    assert list(fields_in(ARGS_FIELDS, NEWEST)) == list(theirs)
    for name, field in theirs.items():
        default = field.default if field.default_factory is None else field.default_factory()
        value = getattr(default, "value", default)  # enums are written as their values
        assert ARG_DEFAULTS[name] == value, name


def test_quantization_scheme_fields() -> None:
    from compressed_tensors.quantization import QuantizationScheme

    assert [f.name for f in SCHEME_FIELDS] == list(QuantizationScheme.model_fields)
    assert list(fields_in(SCHEME_FIELDS, NEWEST)) == list(QuantizationScheme.model_fields)


def test_presets_of_the_release_and_their_contents() -> None:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

    assert preset_names(NEWEST) == sorted(PRESET_SCHEMES)
    assert set(PRESETS) == set(PRESET_SCHEMES)
    for name, preset in PRESETS.items():
        if preset.scheme is None:
            continue
        theirs = QuantizationScheme(targets=["Linear"], **PRESET_SCHEMES[name])
        ours = QuantizationScheme(targets=["Linear"], **{k: QuantizationArgs(**v) for k, v in preset.scheme.items()})
        assert ours == theirs, name
