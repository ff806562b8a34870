"""One one-shot run over two processes (``torchrun --nproc-per-node 2``, gloo on the CPU):
the calibration batches shared out, the statistics joined at each block's end (pruning's
summed, SmoothQuant's ranges by their extremes) or relayed from process to process in the one
process's order (GPTQ, AWQ, static input ranges), each module solved on one process and sent
to the other. The result is the one-process run's (pruning: up to the order of float sums;
the others: bit for bit), each process runs about half of the decoder-layer forward calls,
and a statistic that cannot be joined is refused by name."""

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


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The one-process run of a recipe (made once per module): ``(its rank0.pt, its folder)``."""
    done: dict[str, tuple[dict[str, Any], pathlib.Path]] = {}

    def get(recipe: str) -> tuple[dict[str, Any], pathlib.Path]:
        if recipe not in done:
            out = tmp_path_factory.mktemp("one") / recipe
            done[recipe] = (_run(recipe, out, 1)[0], out)
        return done[recipe]
    return get


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


def test_expert_pruning_over_two_processes_keeps_the_one_process_experts(tmp_path: pathlib.Path) -> None:
    """REAP's saliency joined over two processes (each ran half the batches) keeps the experts the
    one-process run keeps, in every process, with the same tensors."""
    one, = _run("reap", tmp_path / "one", 1)
    two = _run("reap", tmp_path / "two", 2)
    assert all(r["calls"] <= 0.6 * one["calls"] for r in two)
    assert len(one["experts"]) == 3 and all(len(k) == 4 for k in one["experts"].values())
    for r in two:
        assert r["experts"] == one["experts"]
        assert r["state"].keys() == one["state"].keys()
        assert all(torch.equal(r["state"][k], one["state"][k]) for k in one["state"])


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
def test_gptq_over_two_processes_saves_the_one_process_folder(tmp_path: pathlib.Path, how: str,
                                                             one_process: Any) -> None:
    """The model passed as an object, or as a checkpoint folder streamed block by
    block in each process (its one-process run from the same folder). GPTQ's Hessians are
    relayed in one process's order: the folder is the one process's, bit for bit."""
    one, folder = one_process(how)
    two = _run(how, tmp_path / "two", 2)
    if how == "gptq":
        assert all(r["calls"] <= 0.6 * one["calls"] for r in two)
    same, total, identical = _grids(folder / "saved", tmp_path / "two" / "saved")
    assert same == total and identical


def test_gptq_with_its_hessians_summed_is_the_one_process_run_up_to_float_sums(tmp_path: pathlib.Path,
                                                                              one_process: Any) -> None:
    """``distributed_statistics="sum"`` (llm-compressor's way): each process sums its own
    batches, the sums are added; the grid agrees but for the order of those sums."""
    _, folder = one_process("gptq")
    two = _run("gptq-sum", tmp_path / "two", 2)
    assert all(r["calls"] > 0 for r in two)
    same, total, identical = _grids(folder / "saved", tmp_path / "two" / "saved")
    assert same / total >= 0.98 and not identical  # summed in another order: not every bit


def test_data_each_process_loaded_itself_is_not_shared_out_again(tmp_path: pathlib.Path, one_process: Any) -> None:
    """llm-compressor's scripts load ``get_rank_partition``'s part in each process: each then
    calibrates on all of its own part (about half of the one-process calls, not a quarter),
    its samples ordered within the part, so the grid agrees but for that order."""
    one, folder = one_process("gptq")
    two = _run("gptq-partitioned", tmp_path / "two", 2)
    assert all(0.4 * one["calls"] <= r["calls"] <= 0.6 * one["calls"] for r in two)
    same, total, _ = _grids(folder / "saved", tmp_path / "two" / "saved")
    assert same / total >= 0.98


def test_an_unknown_way_to_join_statistics_is_refused() -> None:
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32))
    with pytest.raises(ValueError, match=r"distributed_statistics='fast': give 'auto'.*'relay'.*'sum'"):
        recipe_spec.oneshot(model=model, recipe="s_stage:\n  s_modifiers:\n    SparseGPTModifier: {sparsity: 0.5}\n",
                            dataset=[{"input_ids": list(range(4, 20))}], distributed_statistics="fast", progress=False)


@pytest.mark.parametrize("recipe", ["owl-smoothquant-fp8", "awq"])
def test_activation_statistics_over_two_processes_give_the_one_process_model(tmp_path: pathlib.Path,
                                                                             recipe: str) -> None:
    """OWL's activation norms (and Wanda's row scalars) summed, then SmoothQuant's channel
    ranges joined by their extremes and FP8's static input ranges relayed; AWQ's activation
    means relayed and every call's search loss added in the one process's order: every tensor
    of the model is the one process's, while each process runs about half the forward calls."""
    one, = _run(recipe, tmp_path / "one", 1)
    two = _run(recipe, tmp_path / "two", 2)
    assert all(r["calls"] <= 0.6 * one["calls"] for r in two)
    assert set(one["state"]) == set(two[0]["state"])
    if recipe == "owl-smoothquant-fp8":
        assert sum(k.endswith("input_scale") for k in one["state"]) == 21
        sparsity = [float((v == 0).float().mean()) for k, v in one["state"].items() if k.endswith("proj.weight")]
        assert len(set(round(x, 3) for x in sparsity)) > 1  # OWL: one sparsity per layer
    for k, a in one["state"].items():
        assert torch.equal(a, two[0]["state"][k]) and torch.equal(a, two[1]["state"][k]), k


def test_a_statistic_that_cannot_be_joined_is_refused_by_name() -> None:
    from types import SimpleNamespace

    from recipe_spec.oneshot.distributed import refuse_unshared

    class Private:
        def add(self, x: Any, sequences: int) -> None:
            del x, sequences

    mod = SimpleNamespace(type="MyModifier", where="stage.modifiers[0]")
    with pytest.raises(ValueError, match=r"MyModifier \(stage.modifiers\[0\]\) cannot run over several "
                                         r"processes: its calibration statistic \(Private\).*without torchrun"):
        refuse_unshared([mod], {0: Private()})
    refuse_unshared([mod], {0: None})


def test_get_rank_partition_splits_as_llm_compressor_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe_spec.datasets.utils import get_rank_partition

    # floor(S·r/W) to floor(S·(r+1)/W), worked by hand for 10 samples over 3 processes
    assert [get_rank_partition("train", 10, rank=r, world_size=3) for r in range(3)] == [
        "train[0:3]", "train[3:6]", "train[6:10]"]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert get_rank_partition("train_sft", 7) == "train_sft[3:7]"  # torchrun's environment
    with pytest.raises(ValueError, match=r"already selects rows; give the split's name"):
        get_rank_partition("train[:100]", 10)
