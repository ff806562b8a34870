"""One-shot quantization through ``recipe_spec.oneshot`` on a tiny ``LlamaForCausalLM`` placed
on a CUDA device, each run checked against numbers from outside the project:

- the smoothing fixtures (``tests/fixtures/smoothing``: llm-compressor 0.14's AWQ then W4 group
  32, symmetric and asymmetric, and SmoothQuant then GPTQ W8A8): the checks of
  ``test_oneshot_smoothing_torch.py`` against llm-compressor's stored tensors;
- GPTQ W4 group 32, and SparseGPT 2:4 then GPTQ with ``preserve_masks``: scales are
  compressed-tensors' ``calculate_qparams`` of the weights, each weight lies on compressed-
  tensors' grid, every group of four keeps two zeros; the CUDA run against the CPU run;
- round to nearest W8A8 and FP8_DYNAMIC: the weights untouched, the scales compressed-tensors'
  own (``absmax / 127.5``, ``absmax / 448``), the grid points the same on both devices;
- the folder ``output_dir`` writes from the CUDA model: its safetensors load on the CPU, equal
  to the CPU run's folder, and transformers loads it back through compressed-tensors.

As in ``test_features_cuda_runs.py``: the ``cpu`` run passes on any machine, the ``cuda`` one
(marked ``cuda``, skipped without a GPU) also runs the CPU and compares; every run of ours is
watched by :class:`device_audit.PlacementAudit`. The GPU's float32 sums and Cholesky factors
differ from the CPU's in the last bits, and two kinds of near tie then go either way: GPTQ's
rounding (the error it carries on moves later entries of the row), and the symmetric grids'
``absmax / 7.5`` (``/ 127.5``), which puts each group's largest negative weight exactly on a
rounding tie, so an AWQ grid search may pick a neighbouring ratio whose loss differs by 1%. The
CUDA tolerances below were sized by running the CUDA branches on the CPU with the calibration
activations perturbed by 1e-7 and 1e-6 relative (up to 2 of AWQ's 8 mappings flipped, 98.9%
of a GPTQ weight on the same grid point at worst; all passed; at 1e-5 the smoothed norms'
1e-5 bound is the first to fail).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import pytest
import smoothing_reference as ref

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("compressed_tensors")

from device_audit import placement_checked  # noqa: E402

import recipe_spec  # noqa: E402
from recipe_spec.oneshot import last_report  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
FIXTURES = ("awq_w4_sym_g32", "awq_w4_asym_g32_both_n10", "sq_gptq_w8a8")
GPTQ_W4 = """quant_stage:
  quant_modifiers:
    GPTQModifier:
      ignore: [lm_head]
      config_groups:
        group_0:
          targets: [Linear]
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 32}
"""
STAGED = """sparsity_stage:
  sparsity_modifiers:
    SparseGPTModifier: {sparsity: 0.5, mask_structure: "2:4", targets: [Linear], ignore: ["re:.*lm_head"]}
""" + GPTQ_W4
RTN = "q_stage:\n  q_modifiers:\n    QuantizationModifier: {{scheme: {}, targets: [Linear], ignore: [lm_head]}}\n"
RECIPES = {"gptq_w4_g32": GPTQ_W4, "rtn_w8a8": RTN.format("W8A8")}
#: per weight tensor / over all of them: fraction on the CPU's (llm-compressor's) grid point
#: after GPTQ on the GPU. GPTQ carries each rounding's error to the next columns: a near tie
#: the GPU's float32 rounds the other way moves the rest of the row (int8, with its finer grid,
#: more than int4); every entry but a few stays within one step (:func:`_same_grid`).
CUDA_GRID = (0.8, 0.85)
#: round to nearest on the GPU: maxima, one true division (``absmax / 127.5``, by an array as
#: compressed-tensors divides: torch on a GPU multiplies by the reciprocal of a Python number)
#: and rounding, all exact: the CPU's grid points, every one
CUDA_RTN = (1.0, 1.0)


def _oneshot(recipe: str, device: str, data: bool = True, **options: Any) -> tuple[Any, dict[str, Any], Any]:
    """The fixture's Llama on ``device`` after ``oneshot``: the model, its state on the CPU, the report."""
    model = ref.model().to(device)
    with placement_checked():  # on a GPU without TF32: tests/conftest.py
        recipe_spec.oneshot(model=model, recipe=recipe, num_calibration_samples=8, shuffle_calibration_samples=False,
                            **({"dataset": ref.samples()} if data else {}), **options)
    report = last_report()
    assert report is not None
    if "output_dir" not in options:  # saving leaves the model compressed (compressed-tensors' own tensors)
        tensors = dict(model.named_parameters()) | dict(model.named_buffers())
        assert all(t.device.type == device for t in tensors.values()), \
            {n: str(t.device) for n, t in tensors.items() if t.device.type != device}
    return model, {k: v.detach().cpu() for k, v in model.state_dict().items()}, report


def _args(model: Any, base: str) -> Any:
    return model.get_submodule(base.rstrip(".")).quantization_scheme.weights


def _zero(zero: Any, scale: Any) -> Any:
    return zero.to(scale.dtype) if zero.dtype == torch.int8 else zero


def _grid(args: Any, weight: Any, scale: Any, zero: Any) -> Any:
    """compressed-tensors' own ``quantize``: each weight's grid point (CPU tensors)."""
    from compressed_tensors.quantization.lifecycle.forward import quantize

    return quantize(weight, scale, _zero(zero, scale), args).float()


def _rel(got: Any, want: Any) -> float:
    return float((got.double() - want.double()).abs().max() / max(float(want.double().abs().max()), 1e-30))


def _same_grid(model: Any, a: dict[str, Any], b: dict[str, Any], keys: list[str], per_tensor: float,
               pooled: float) -> None:
    """At least ``per_tensor`` of each weight's entries (``pooled`` of all) on the same grid
    point in ``a`` and ``b``, and 98% (all when both are 1) within one step."""
    assert keys
    same = total = 0
    for key in keys:
        base = key[: -len("weight")]
        args = _args(model, base)
        ga = _grid(args, a[key], a[base + "weight_scale"], a[base + "weight_zero_point"])
        gb = _grid(args, b[key], b[base + "weight_scale"], b[base + "weight_zero_point"])
        hits = int((ga == gb).sum())
        near = float(((ga - gb).abs() <= 1).float().mean())
        assert near >= (1.0 if per_tensor == pooled == 1.0 else 0.98), (key, near)
        assert hits >= per_tensor * ga.numel(), (key, hits / ga.numel())
        same, total = same + hits, total + ga.numel()
    assert same >= pooled * total, same / total


# -- llm-compressor's smoothing fixtures ------------------------------------------------------------
def _flipped(name: str, report: Any) -> dict[str, tuple[tuple[str, ...], Any, Any]]:
    """AWQ mappings whose scales are not llm-compressor's (another ratio of the grid): smooth
    layer -> (balance layers, our scales, theirs), on the CPU."""
    stored, out = ref.tensors(name), {}
    for s in report.smoothing:
        if s.modifier != "AWQModifier":
            continue
        ours, theirs = torch.as_tensor(s.scales).detach().cpu().double(), stored[f"awq.best_scales.{s.smooth}"].double()
        if _rel(ours, theirs) > 1e-3:
            out[s.smooth] = (tuple(s.balance), ours, theirs)
    return out


def _unsmoothed(key: str, value: Any, flipped: dict[str, tuple[tuple[str, ...], Any, Any]], side: int) -> Any:
    """``value`` with the scaling of each flipped mapping undone (``side`` 1: ours, 2: theirs)."""
    out = value.double()
    for smooth, entry in flipped.items():
        scales = entry[side]
        if key == smooth + ".weight":  # a norm's weight, or the rows of the Linear before
            out = out * (scales if out.ndim == 1 else scales[:, None])
        if key in {b + ".weight" for b in entry[0]}:
            out = out / scales[None, :]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FIXTURES)
def test_smoothing_then_quantization_is_llm_compressors_run(name: str, device: str) -> None:
    """On the CPU exactly the checks of ``test_oneshot_smoothing_torch.py``; on the GPU the
    same, but an AWQ mapping may take a neighbouring ratio (at most half of them; its weights
    must then be llm-compressor's up to the two scalings, and its loss within 20% of
    llm-compressor's best) and GPTQ's / the symmetric grid's ties may go either way
    (:data:`CUDA_GRID`)."""
    case = ref.cases()["cases"][name]
    model, state, report = _oneshot(case["recipe_yaml"], device)
    events = [e for e in case["events"] if e["event"] in ("awq.best_scale", "smoothquant.smooth")]
    assert [(s.smooth, list(s.balance)) for s in report.smoothing] == [
        (e["smooth_layer"], e["balance_layers"]) for e in events]
    quantized = [r.module for r in report.layers]
    assert len(quantized) == 14 and "lm_head" not in quantized
    flipped = _flipped(name, report)
    if device == "cpu":
        assert not flipped, sorted(flipped)
    else:
        assert len(flipped) <= len(events) // 2, sorted(flipped)
        for s, e in zip(report.smoothing, events, strict=True):
            if s.smooth in flipped:  # losses of ~1e-7, where float32's rounding weighs: within 2x
                assert s.best_loss <= min(s.initial_loss or math.inf, 2 * e["best_error"]), (s.smooth, s.best_loss,
                                                                                     e["best_error"])
    touched = {k for smooth, (balance, _, _) in flipped.items() for k in (smooth, *balance)}
    want, initial = {k[len("final."):]: v for k, v in ref.tensors(name).items() if k.startswith("final.")}, \
        ref.tensors("initial")
    assert set(state) - set(initial) <= set(want)
    grid_keys = []
    for key, value in state.items():
        if key not in want:
            assert torch.equal(value, initial[key]), key
            continue
        theirs = want[key]
        assert (value.dtype, value.shape) == (theirs.dtype, theirs.shape), key
        module = key.rsplit(".", 1)[0]
        if module in touched:  # a mapping that took another ratio: the weights before it
            if key.endswith("weight"):
                err = _rel(_unsmoothed(key, value, flipped, 1), _unsmoothed(key, theirs, flipped, 2))
                assert err <= 1e-5, (key, err)
        elif key.endswith(("_scale", "_zero_point")):
            assert _rel(value, theirs) <= 1e-4, key
        elif key.endswith("proj.weight"):
            grid_keys.append(key)
        else:  # a smoothed norm weight
            assert ref.relative_error(value, theirs) <= 1e-5, key
    per_tensor, pooled = (0.99, 0.0) if device == "cpu" else CUDA_GRID
    _same_grid(model, state, {**state, **want}, grid_keys, per_tensor, pooled)


# -- GPTQ W4 group 32, and SparseGPT 2:4 then GPTQ ---------------------------------------------------
def _minmax_qparams(args: Any, weight: Any) -> tuple[Any, Any]:
    """compressed-tensors' ``calculate_qparams`` of each output row's groups (its min-max observer)."""
    from compressed_tensors.quantization.utils import calculate_qparams

    rows = weight.reshape(weight.shape[0], -1, args.group_size) if args.group_size else weight[:, None, :]
    return calculate_qparams(rows.amin(-1), rows.amax(-1), args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("staged", [False, True], ids=["gptq", "sparsegpt_then_gptq"])
def test_gptq_w4_group32(staged: bool, device: str) -> None:
    """Each weight on compressed-tensors' grid of its stored scale (``fake_quantize`` leaves it
    unchanged); GPTQ alone: the scales are the min-max of the weight before GPTQ (the initial
    one); with SparseGPT first and ``preserve_masks``: every group of four keeps two zeros. On
    the GPU also the CPU run's names, dtypes and shapes, scales within 1e-4, the same grid
    points (:data:`CUDA_GRID`) and the same zeros in at least 90% of each weight's rows."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize

    options = {"preserve_masks": True} if staged else {}
    model, state, report = _oneshot(STAGED if staged else GPTQ_W4, device, **options)
    initial = ref.tensors("initial")
    keys = sorted(k for k in state if k.endswith("proj.weight"))
    assert len(keys) == 14 and {r.module for r in report.layers if r.grid} == {k[: -len(".weight")] for k in keys}
    for key in keys:
        base = key[: -len("weight")]
        args, weight = _args(model, base), state[key]
        scale, zero = state[base + "weight_scale"], state[base + "weight_zero_point"]
        assert scale.shape == (weight.shape[0], weight.shape[1] // 32) and zero.dtype == torch.int8, key
        on_grid = fake_quantize(weight, scale, _zero(zero, scale), args)
        assert float((on_grid - weight).abs().max()) <= 1e-6 * float(scale.max()), key
        if staged:
            assert int((weight == 0).reshape(weight.shape[0], -1, 4).sum(-1).min()) >= 2, key
        else:
            want_scale, want_zero = _minmax_qparams(args, initial[key])
            assert _rel(scale, want_scale) <= 1e-6 and torch.equal(zero.float(), want_zero.float()), key
    if device == "cpu":
        return
    _, cpu, cpu_report = _oneshot(STAGED if staged else GPTQ_W4, "cpu", **options)
    for ours, theirs in zip(report.layers, cpu_report.layers, strict=True):  # the solver's own loss
        assert ours.module == theirs.module
        if ours.loss is not None and theirs.loss is not None:
            assert ours.loss <= 1.1 * theirs.loss + 1e-9, (ours.module, ours.loss, theirs.loss)
    assert {k: (v.dtype, v.shape) for k, v in state.items()} == {k: (v.dtype, v.shape) for k, v in cpu.items()}
    for key, value in state.items():
        if key.endswith("weight_scale"):
            assert _rel(value, cpu[key]) <= 1e-4, key
        elif not key.endswith(("proj.weight", "_zero_point")):
            assert torch.equal(value, cpu[key]), key
    _same_grid(model, state, cpu, keys, *CUDA_GRID)
    for key in keys:
        rows = ((state[key] == 0) == (cpu[key] == 0)).all(1)
        assert float(rows.float().mean()) >= 0.9, key


# -- round to nearest --------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scheme", ["W8A8", "FP8_DYNAMIC"])
def test_round_to_nearest(scheme: str, device: str) -> None:
    """No data, no solve: the weights stay as they were (float32, as llm-compressor keeps them),
    each scale is compressed-tensors' min-max ``calculate_qparams`` of its output row, written
    out by hand too (symmetric int8: ``absmax / 127.5``, FP8 e4m3: ``absmax / 448``), and the
    grid points under our scale are those under compressed-tensors'. On the GPU: the CPU run's
    scales within 1e-6 and every grid point."""
    model, state, report = _oneshot(RTN.format(scheme), device, data=False)
    assert all(p == "datafree" for _, p in report.pipelines)
    initial = ref.tensors("initial")
    keys = sorted(k for k in state if k.endswith("proj.weight"))
    assert len(keys) == 14
    for key in keys:
        base = key[: -len("weight")]
        args, weight = _args(model, base), state[key]
        assert torch.equal(weight, initial[key]), key
        scale, zero = state[base + "weight_scale"], state[base + "weight_zero_point"]
        # compressed-tensors' observer where the run computed (a GPU divides as it does)
        want_scale, want_zero = (t.cpu() for t in _minmax_qparams(args, weight.to(device)))
        absmax = weight.abs().amax(1, keepdim=True)
        by_hand = absmax / (127.5 if scheme == "W8A8" else 448.0)
        assert scale.shape == (weight.shape[0], 1) and scale.dtype == torch.float32, key
        assert _rel(scale, want_scale) <= 1e-6 and _rel(scale, by_hand) <= 1e-6, key
        assert zero.dtype == want_zero.dtype and not bool(zero.float().any()), key
        assert torch.equal(_grid(args, weight, scale, zero), _grid(args, weight, want_scale, want_zero)), key
    if device == "cpu":
        return
    _, cpu, _ = _oneshot(RTN.format(scheme), "cpu", data=False)
    assert {k: (v.dtype, v.shape) for k, v in state.items()} == {k: (v.dtype, v.shape) for k, v in cpu.items()}
    for key, value in state.items():
        if key.endswith("weight_scale"):
            assert _rel(value, cpu[key]) <= 1e-6, key
        else:
            assert torch.equal(value.float(), cpu[key].float()), key
    _same_grid(model, state, cpu, keys, *CUDA_RTN)


# -- saving --------------------------------------------------------------------------------------------
def _folder(out: pathlib.Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved ``quantization_config`` and every tensor of the folder, read on the CPU."""
    tensors: dict[str, Any] = {}
    for path in sorted(out.glob("*.safetensors")):
        tensors.update(safetensors_torch.load_file(str(path), device="cpu"))
    assert tensors and all(t.device.type == "cpu" for t in tensors.values())
    return json.loads((out / "config.json").read_text())["quantization_config"], tensors


def _ints(tensors: dict[str, Any], base: str, bits: int) -> Any:
    """A saved weight's grid points: int8 as saved, or unpacked from pack-quantized int32."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    if base + "weight_packed" in tensors:
        shape = torch.Size(tensors[base + "weight_shape"].tolist())
        return unpack_from_int32(tensors[base + "weight_packed"], bits, shape).float()
    return tensors[base + "weight"].float()


def _dequantized(out: pathlib.Path, config: dict[str, Any]) -> dict[str, Any]:
    """The folder loaded by transformers and decompressed by compressed-tensors, on the CPU."""
    from compressed_tensors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig

    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    ModelCompressor(quantization_config=QuantizationConfig.model_validate(config)).decompress_model(loaded)
    return {k: v.detach().cpu() for k, v in loaded.state_dict().items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_output_dir_from_the_device(recipe: str, device: str, tmp_path: pathlib.Path) -> None:
    """``output_dir`` from a model on ``device``: the folder (pack-quantized W4, int-quantized
    W8A8) reads on the CPU; its grid points times its scales are what compressed-tensors
    decompresses after transformers loads it. On the GPU: the CPU run's folder, the same
    config, names, dtypes and shapes, scales within 1e-4 (GPTQ) or 1e-6, grid points as
    :data:`CUDA_GRID` (GPTQ) or all, every other tensor equal."""
    gptq = recipe.startswith("gptq")
    bits = 4 if gptq else 8
    _oneshot(RECIPES[recipe], device, data=gptq, output_dir=tmp_path / device)
    config, saved = _folder(tmp_path / device)
    assert config["format"] == ("pack-quantized" if gptq else "int-quantized") and config["ignore"] == ["lm_head"]
    assert (tmp_path / device / "recipe.yaml").read_text() == RECIPES[recipe]
    bases = sorted(k[: -len("weight_scale")] for k in saved if k.endswith("weight_scale"))
    assert len(bases) == 14
    loaded = _dequantized(tmp_path / device, config)
    for base in bases:
        scale = saved[base + "weight_scale"]
        ints = _ints(saved, base, bits)
        width = ints.shape[1] // scale.shape[1]
        want = ints * scale.repeat_interleave(width, dim=1)
        assert float((loaded[base + "weight"] - want).abs().max()) <= 1e-6 * float(scale.max()), base
    if device == "cpu":
        return
    _oneshot(RECIPES[recipe], "cpu", data=gptq, output_dir=tmp_path / "cpu")
    cpu_config, cpu = _folder(tmp_path / "cpu")
    assert config == cpu_config
    assert {k: (v.dtype, v.shape) for k, v in saved.items()} == {k: (v.dtype, v.shape) for k, v in cpu.items()}
    per_tensor, pooled = CUDA_GRID if gptq else CUDA_RTN
    same = total = 0
    for base in bases:
        a, b = _ints(saved, base, bits), _ints(cpu, base, bits)
        hits = int((a == b).sum())
        assert hits >= per_tensor * a.numel(), (base, hits / a.numel())
        same, total = same + hits, total + a.numel()
    assert same >= pooled * total, same / total
    for key, value in saved.items():
        if key.endswith("weight_scale"):
            assert _rel(value, cpu[key]) <= (1e-4 if gptq else 1e-6), key
        elif not key.endswith(("weight_packed", "proj.weight")):
            assert torch.equal(value, cpu[key]), key
