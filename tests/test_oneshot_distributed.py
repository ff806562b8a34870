"""One one-shot run over two processes (``torchrun --nproc-per-node 2``, gloo on the CPU):
the calibration batches shared out, the statistics summed at each block's end (pruning) or
relayed from process to process in the one process's order (GPTQ), each module solved on one
process and sent to the other. The result is the one-process run's (pruning: up to the order
of float sums; GPTQ: bit for bit), each process runs about half of the decoder-layer forward
calls, and a modifier whose statistics are not combined yet is refused before any weight
changes."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import recipe_spec  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("distributed_oneshot_worker.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(recipe: str, out: pathlib.Path, processes: int) -> list[dict[str, Any]]:
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if processes == 1:
        argv = [sys.executable, str(WORKER), recipe, str(out)]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
                f"--master-port={_port()}", str(WORKER), recipe, str(out)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(processes)]


@pytest.mark.parametrize("recipe", ["sparsegpt", "wanda"])
def test_pruning_over_two_processes_is_the_one_process_run(tmp_path: pathlib.Path, recipe: str) -> None:
    one, = _run(recipe, tmp_path / "one", 1)
    two = _run(recipe, tmp_path / "two", 2)
    assert all(r["calls"] <= 0.6 * one["calls"] for r in two)
    weights = [k for k in one["state"] if k.endswith("proj.weight")]
    assert len(weights) == 21
    total = same = 0
    for k in weights:
        a, b = one["state"][k], two[0]["state"][k]
        assert torch.equal(b, two[1]["state"][k])  # both processes end with the same model
        total += a.numel()
        same += int(((a == 0) == (b == 0)).sum())
        assert float((a == 0).float().mean()) == pytest.approx(0.5, abs=0.01)
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    assert same / total >= 0.99


def _grids(one: pathlib.Path, two: pathlib.Path) -> tuple[int, int, bool]:
    """(grid values equal, grid values, every tensor equal) of two saved GPTQ W4A16 folders."""
    from compressed_tensors.compressors.pack_quantized import unpack_from_int32
    from safetensors.torch import load_file

    a, b = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert set(a) == set(b)
    total = same = 0
    for k in a:
        if k.endswith("weight_packed"):
            shape = torch.Size(a[k.replace("packed", "shape")].tolist())
            x, y = unpack_from_int32(a[k], 4, shape), unpack_from_int32(b[k], 4, shape)
            total += x.numel()
            same += int((x == y).sum())
    assert total == 3 * (4 * 128 * 128 + 3 * 128 * 256) - 3 * 2 * 128 * 64
    return same, total, all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("how", ["gptq", "gptq-streamed"])
def test_gptq_over_two_processes_saves_the_one_process_folder(tmp_path: pathlib.Path, how: str) -> None:
    """The model passed as an object, or as a checkpoint folder streamed block by
    block in each process (its one-process run from the same folder). GPTQ's Hessians are
    relayed in one process's order: the folder is the one process's, bit for bit."""
    one, = _run(how, tmp_path / "one", 1)
    two = _run(how, tmp_path / "two", 2)
    if how == "gptq":
        assert all(r["calls"] <= 0.6 * one["calls"] for r in two)
    same, total, identical = _grids(tmp_path / "one" / "saved", tmp_path / "two" / "saved")
    assert same == total and identical


def test_gptq_with_its_hessians_summed_is_the_one_process_run_up_to_float_sums(tmp_path: pathlib.Path) -> None:
    """``distributed_statistics="sum"`` (llm-compressor's way): each process sums its own
    batches, the sums are added; the grid agrees but for the order of those sums."""
    _run("gptq", tmp_path / "one", 1)
    two = _run("gptq-sum", tmp_path / "two", 2)
    assert all(r["calls"] > 0 for r in two)
    same, total, identical = _grids(tmp_path / "one" / "saved", tmp_path / "two" / "saved")
    assert same / total >= 0.98 and not identical  # summed in another order: not every bit


def test_an_unknown_way_to_join_statistics_is_refused() -> None:
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32))
    with pytest.raises(ValueError, match=r"distributed_statistics='fast': give 'auto'.*'relay'.*'sum'"):
        recipe_spec.oneshot(model=model, recipe="s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5}\n",
                            dataset=[{"input_ids": list(range(4, 20))}], distributed_statistics="fast", progress=False)


class _TwoProcesses:
    rank, world = 0, 2

    def sum(self, array: Any) -> Any:
        return array * 2

    def sum_int(self, value: int) -> int:
        return value * 2

    def gather(self, value: Any) -> list[Any]:
        return [value, value]

    def barrier(self) -> None:
        pass


@pytest.mark.parametrize("recipe", [
    "s_stage:\n  s_modifiers:\n    SmoothQuantModifier:\n      smoothing_strength: 0.5\n",
    "q_stage:\n  q_modifiers:\n    QuantizationModifier:\n      scheme: FP8\n      targets: [Linear]\n"
    "      ignore: [lm_head]\n",
])
def test_what_is_not_combined_yet_is_refused_before_any_weight_changes(recipe: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    from recipe_spec_torch.oneshot import TorchCalibrationHost

    monkeypatch.setattr(TorchCalibrationHost, "collective", lambda self: _TwoProcesses())
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = [{"input_ids": list(range(4, 28)), "attention_mask": [1] * 24}] * 4
    with pytest.raises(ValueError, match="cannot run over several processes.*run it in one process"):
        recipe_spec.oneshot(model=model, recipe=recipe, dataset=data, num_calibration_samples=4, progress=False)
    after = model.state_dict()
    assert set(after) == set(before) and all(torch.equal(before[k], after[k]) for k in before)
