"""Small PyTorch networks and data for the backend tests (deterministic, CPU, a few ms a step)."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """conv1 -> bn1 -> relu -> conv2 -> relu -> pool -> fc1 -> relu -> fc2 (the conformance net)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = self.pool(x).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def build(seed: int = 0, lr: float = 0.05, groups: bool = False):
    """model, optimizer, inputs (8 batches of 4), targets."""
    torch.manual_seed(seed)
    model = Net()
    g = torch.Generator().manual_seed(1234)
    inputs = torch.randn(8, 4, 3, 12, 12, generator=g)
    targets = torch.randn(8, 4, 8, generator=g)
    if groups:
        convs = [p for n, p in model.named_parameters() if not n.startswith("fc")]
        fcs = [p for n, p in model.named_parameters() if n.startswith("fc")]
        params = [{"params": convs}, {"params": fcs, "lr": lr / 5}]
    else:
        params = model.parameters()
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
    return model, optimizer, inputs, targets


def train(model, optimizer, inputs, targets, steps: int, start: int = 0) -> list[float]:
    """``steps`` optimizer steps from step ``start``; the losses."""
    losses = []
    model.train()
    for k in range(start, start + steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs[k % 8]), targets[k % 8])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def sparsity(param: torch.Tensor) -> float:
    return float((param == 0).sum()) / param.numel()


@torch.no_grad()
def eval_loss(model, inputs, targets) -> float:
    """Mean loss over all 8 batches, in training mode (batch statistics), without learning."""
    model.train()
    return float(sum(nn.functional.mse_loss(model(inputs[k]), targets[k]) for k in range(8)) / 8)
