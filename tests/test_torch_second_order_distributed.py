"""M-FAC and OBS pruning under DistributedDataParallel (two CPU processes, gloo).

* Training-time M-FAC (gradient window): every rank keeps the full ``num_grads`` window of the
  all-reduced gradients, so every rank takes the same step (nothing is gathered).
* With a grad sampler (OBS, M-FAC with a sampler, one-shot M-FAC): every rank samples
  ``num_grads / world`` gradients from its own data on the unwrapped module, and the rows of
  all ranks are gathered, so every rank inverts the same Fisher of ``num_grads`` rows.
* Masks and weights are identical on both ranks; the one-shot result equals a one-process run
  whose sampler yields both ranks' batches in rank order (the gathered rows are exactly their union).
* A ``num_grads`` that does not split evenly over the processes is refused at ``modify()`` (M012).

One launch of two ranks runs every case (fresh model each), one more process the one-process
run; the tests below read what they wrote.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.slow

WINDOW = """
modifiers:
  - !MFACPruningModifier
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.2
    final_sparsity: 0.6
    start_epoch: 1
    end_epoch: 3
    update_frequency: 1
    num_grads: 4
    damp: 1.0e-4
    fisher_block_size: 64
    available_devices: [cpu]
"""

OBS = """
modifiers:
  - !OBSPruningModifier
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.2
    final_sparsity: 0.6
    start_epoch: 1
    end_epoch: 3
    update_frequency: 1
    num_grads: 8
    damp: 1.0e-4
    fisher_block_size: 16
    num_recomputations: 2
"""

# M-FAC during training with a sampler and a num_grads table: 4 rows at sparsity 0, 6 after.
SAMPLED_MFAC = """
modifiers:
  - !MFACPruningModifier
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.2
    final_sparsity: 0.6
    start_epoch: 1
    end_epoch: 3
    update_frequency: 1
    num_grads: {0.0: 4, 0.3: 6}
    damp: 1.0e-4
    fisher_block_size: 64
    available_devices: [cpu]
"""

ONESHOT = """
modifiers:
  - !MFACPruningModifier
    params: [fc1.weight, fc2.weight]
    init_sparsity: 0.1
    final_sparsity: 0.7
    start_epoch: 0
    end_epoch: 1
    update_frequency: 1
    num_grads: 8
    damp: 1.0e-4
    fisher_block_size: 32
    available_devices: [cpu]
"""

ODD_OBS = OBS.replace("num_grads: 8", "num_grads: 3")
ODD_TABLE = SAMPLED_MFAC.replace("{0.0: 4, 0.3: 6}", "{0.0: 4, 0.3: 5}")
ODD_ONESHOT = ONESHOT.replace("num_grads: 8", "num_grads: 7")
ODD_WINDOW = WINDOW.replace("num_grads: 4", "num_grads: 3")  # not split: any count runs

STEPS_PER_EPOCH, TRAIN_STEPS, SAMPLER_BATCHES = 4, 14, 4

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    import torch.distributed as dist
    from torch import nn
    import recipe_spec.pruning.second_order.pruner as pruner_mod
    from recipe_spec import ScheduledModifierManager
    from recipe_spec.diagnostics import RecipeError
    from recipe_spec_torch.second_order import TorchHost

    torch.set_num_threads(1)
    rank, world, out, modes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
    R = {recipes!r}
    SPE, STEPS, NB = {spe}, {steps}, {nb}

    # What the pruner is given: rows into / out of gather_rows, rows of every Fisher inverse,
    # rows of every M-FAC step, batches the sampler yielded.
    log = {{}}
    cur = []
    gather = TorchHost.gather_rows
    def gather_rows(self, rows):
        full = gather(self, rows)
        cur.append(("gather", rows.shape[0], full.shape[0], full.clone()))
        return full
    TorchHost.gather_rows = gather_rows
    fisher = pruner_mod.FisherInverse
    def fisher_inverse(ops, grads, *a, **k):
        cur.append(("fisher", grads.shape[0]))
        return fisher(ops, grads, *a, **k)
    pruner_mod.FisherInverse = fisher_inverse
    mfac_step = pruner_mod.mfac_step
    def mfac(ops, weights, masks, grads, *a, **k):
        cur.append(("mfac", grads.shape[0]))
        return mfac_step(ops, weights, masks, grads, *a, **k)
    pruner_mod.mfac_step = mfac

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 6)
        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    def data(seed, n, batch):
        g = torch.Generator().manual_seed(seed)
        return [(torch.randn(batch, 12, generator=g), torch.randn(batch, 6, generator=g)) for _ in range(n)]

    def sampler(ranks):
        batches = [b for r in ranks for b in data(200 + r, NB, 3)]   # each rank: its own data
        def build(kwargs):
            for x, y in batches:
                cur.append(("batch",))
                yield (x,), {{}}, y
        return {{"data_loader_builder": build, "loss_function": nn.functional.mse_loss}}

    def model_and_opt():
        torch.manual_seed(0)
        model = MLP()
        wrapped = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
        return model, wrapped, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def result(model, masks):
        return {{"weights": {{n: p.detach().clone() for n, p in model.named_parameters()}},
                "masks": masks, "log": list(cur)}}

    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    for mode in modes:
        cur.clear()
        model, wrapped, opt = model_and_opt()
        manager = ScheduledModifierManager.from_yaml(R[mode])
        try:
            if mode.endswith("oneshot"):
                # one process: its sampler yields every rank's batches in rank order
                manager.apply(wrapped, grad_sampler=sampler([rank] if world > 1 else range(2)))
                masks = {{n: p.detach() != 0 for n, p in model.named_parameters() if n.endswith("weight")}}
                log[mode] = result(model, masks)
                continue
            opt = manager.modify(wrapped, opt, steps_per_epoch=SPE,
                                 **({{}} if mode.endswith("window") else {{"grad_sampler": sampler([rank])}}))
        except RecipeError as e:
            log[mode] = {{"error": str(e)}}
            continue
        batches = data(100 + rank, 8, 4)                 # each rank trains on its own data
        wrapped.train()
        for k in range(STEPS):
            opt.zero_grad()
            x, y = batches[k % 8]
            nn.functional.mse_loss(wrapped(x), y).backward()
            opt.step()
        state = manager.state_dict()
        log[mode] = result(model, {{k: v[0] for k, v in state["masks"].items()}})
    torch.save(log, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    """
).format(
    recipes={"window": WINDOW, "obs": OBS, "sampled": SAMPLED_MFAC, "oneshot": ONESHOT,
             "odd_obs": ODD_OBS, "odd_table": ODD_TABLE, "odd_oneshot": ODD_ONESHOT,
             "odd_window": ODD_WINDOW},
    spe=STEPS_PER_EPOCH, steps=TRAIN_STEPS, nb=SAMPLER_BATCHES,
)

DDP_MODES = "window,obs,sampled,oneshot,odd_obs,odd_table,odd_oneshot,odd_window"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """rank0, rank1: the two-rank runs of every case; single: the one-process one-shot run."""
    tmp = tmp_path_factory.mktemp("second_order_ddp")
    script = tmp / "ddp.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}

    def launch(rank: int, world: int, out: str, modes: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(script), str(rank), str(world), str(tmp / out), modes],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [launch(0, 2, "rank0.pt", DDP_MODES), launch(1, 2, "rank1.pt", DDP_MODES),
             launch(0, 1, "single.pt", "oneshot")]
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-4000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return {name: torch.load(tmp / f"{name}.pt", weights_only=False) for name in ("rank0", "rank1", "single")}


def _same_on_both_ranks(runs: dict[str, Any], mode: str) -> dict[str, Any]:
    r0, r1 = runs["rank0"][mode], runs["rank1"][mode]
    assert sorted(r0["masks"]) == ["fc1.weight", "fc2.weight"]  # no "module." prefix
    for name in r0["masks"]:
        assert torch.equal(r0["masks"][name], r1["masks"][name]), name
    for name in r0["weights"]:
        assert torch.equal(r0["weights"][name], r1["weights"][name]), name
    return r0


def _sparsity(r: dict[str, Any], target: float, global_sparsity: bool = False) -> None:
    masks = r["masks"]
    if global_sparsity:
        total = sum(m.numel() for m in masks.values())
        zeros = sum(int((~m).sum()) for m in masks.values())
        assert zeros == round(target * total)
    else:
        for name, m in masks.items():
            assert int((~m).sum()) == round(target * m.numel()), name
    for name, m in masks.items():
        assert not r["weights"][name][~m].any(), name


def _entries(r: dict[str, Any], kind: str) -> list[tuple[Any, ...]]:
    return [e for e in r["log"] if e[0] == kind]


def test_mfac_window_keeps_full_window_of_averaged_gradients(runs: dict[str, Any]) -> None:
    r = _same_on_both_ranks(runs, "window")  # each rank trains on its own data
    _sparsity(r, 0.6)
    # three pruning steps (steps 4, 8, 12), each on the full num_grads=4 window; nothing gathered
    assert [e[1] for e in _entries(r, "mfac")] == [4, 4, 4]
    assert not _entries(r, "gather") and not _entries(r, "batch")


def test_obs_training_gathers_num_grads_over_world_from_each_rank(runs: dict[str, Any]) -> None:
    r = _same_on_both_ranks(runs, "obs")
    _sparsity(r, 0.6, global_sparsity=True)
    # 3 pruning steps x 2 recomputations x 2 params: 4 rows per rank, 8 gathered, 8 in each Fisher
    gathers = _entries(r, "gather")
    assert len(gathers) == 12 and {(e[1], e[2]) for e in gathers} == {(4, 8)}
    assert {e[1] for e in _entries(r, "fisher")} == {8} and len(_entries(r, "fisher")) == 12
    assert len(_entries(r, "batch")) == 3 * 2 * 4  # each rank drew num_grads / world batches per inverse
    # the rows of the two ranks differ: each rank sampled its own data, without all-reduce
    for e in gathers:
        assert not torch.equal(e[3][:4], e[3][4:])
    for e0, e1 in zip(gathers, _entries(runs["rank1"]["obs"], "gather"), strict=True):
        assert torch.equal(e0[3], e1[3])


def test_sampled_mfac_table_is_split_over_ranks(runs: dict[str, Any]) -> None:
    r = _same_on_both_ranks(runs, "sampled")
    _sparsity(r, 0.6)
    # num_grads {0: 4, 0.3: 6}: 4 rows at sparsity 0, then 6 (3 per rank) once pruned
    assert [(e[1], e[2]) for e in _entries(r, "gather")] == [(2, 4), (3, 6), (3, 6)]
    assert [e[1] for e in _entries(r, "mfac")] == [4, 6, 6]
    assert len(_entries(r, "batch")) == 2 + 3 + 3


def test_oneshot_mfac_equals_one_process_with_both_ranks_batches(runs: dict[str, Any]) -> None:
    r = _same_on_both_ranks(runs, "oneshot")
    _sparsity(r, 0.7)
    assert [(e[1], e[2]) for e in _entries(r, "gather")] == [(4, 8)]
    assert [e[1] for e in _entries(r, "mfac")] == [8]
    single = runs["single"]["oneshot"]
    assert [e[1] for e in _entries(single, "mfac")] == [8] and len(_entries(single, "batch")) == 8
    # the gathered rows are exactly the one-process rows (rank 0's batches, then rank 1's)
    assert torch.equal(_entries(r, "gather")[0][3], _entries(single, "gather")[0][3])
    for name in r["masks"]:
        assert torch.equal(r["masks"][name], single["masks"][name]), name
        torch.testing.assert_close(r["weights"][name], single["weights"][name], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["odd_obs", "odd_table", "odd_oneshot"])
def test_num_grads_not_divisible_by_world_is_m012(runs: dict[str, Any], mode: str) -> None:
    """Sampled gradients are split evenly over the processes: 3 (OBS), a table's 5 (M-FAC with
    a sampler) and 7 (one-shot) on 2 processes are refused before anything runs."""
    for rank in ("rank0", "rank1"):
        error = runs[rank][mode]["error"]
        assert "M012" in error and "2 processes" in error and "num_grads" in error, error


def test_mfac_window_num_grads_need_not_divide_world(runs: dict[str, Any]) -> None:
    """The training-time window is not split, so an odd num_grads runs under DDP."""
    r = _same_on_both_ranks(runs, "odd_window")
    _sparsity(r, 0.6)
    assert [e[1] for e in _entries(r, "mfac")] == [3, 3, 3]
