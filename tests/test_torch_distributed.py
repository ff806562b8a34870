"""DistributedDataParallel with two CPU processes (gloo): parameter names carry no `module.`,
masks are identical on both ranks and identical to a one-process run."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent
RECIPE = """
modifiers:
  - !GMPruningModifier
    params: [conv2.weight, 're:fc\\d\\.weight']
    init_sparsity: 0.1
    final_sparsity: 0.75
    start_epoch: 0
    end_epoch: 3
    update_frequency: 0.5
"""

SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    import torch.distributed as dist
    sys.path.insert(0, {tests!r})
    from torch_nets import build, train
    from recipe_spec import ScheduledModifierManager

    rank, world, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    model, optimizer, inputs, targets = build()
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    manager = ScheduledModifierManager.from_yaml({recipe!r})
    optimizer = manager.modify(model, optimizer, steps_per_epoch=4)
    train(model, optimizer, inputs, targets, 16)   # every rank sees the same batches
    state = manager.state_dict()
    momentum = {{n.removeprefix("module."): optimizer.state[p]["momentum_buffer"]
                for n, p in model.named_parameters() if n.removeprefix("module.") in state["masks"]}}
    torch.save({{"masks": {{k: v[0] for k, v in state["masks"].items()}}, "momentum": momentum}}, out)
    if world > 1:
        dist.destroy_process_group()
    """
).format(tests=str(TESTS), recipe=RECIPE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_masks_equal_across_ranks_and_to_one_process(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    env = {**__import__("os").environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), "2", str(tmp_path / f"rank{r}.pt")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    single = subprocess.run([sys.executable, str(script), "0", "1", str(tmp_path / "single.pt")], capture_output=True, text=True)
    assert single.returncode == 0, single.stderr[-3000:]
    r0, r1, one = (torch.load(tmp_path / f, weights_only=False)["masks"] for f in ("rank0.pt", "rank1.pt", "single.pt"))
    assert sorted(r0) == ["conv2.weight", "fc1.weight", "fc2.weight"]  # no "module." prefix
    for name in r0:
        assert torch.equal(r0[name], r1[name]) and torch.equal(r0[name], one[name]), name
        assert float((~r0[name]).float().mean()) == round(0.75 * r0[name].numel()) / r0[name].numel()
    # gradients are masked before DDP's all-reduce reads them: the pruned weights' momentum
    # only decays, as in one process (an unmasked all-reduce would feed it every step)
    m0, m1, m_one = (torch.load(tmp_path / f, weights_only=False)["momentum"] for f in ("rank0.pt", "rank1.pt", "single.pt"))
    for name, mask in r0.items():
        torch.testing.assert_close(m0[name], m1[name], rtol=0, atol=0)
        torch.testing.assert_close(m0[name][~mask], m_one[name][~mask], rtol=1e-4, atol=1e-7)
