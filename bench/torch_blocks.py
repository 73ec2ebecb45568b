"""What the PyTorch benches share: a ResNet-style CNN the size of the issue's, and interleaved timing.

Separate processes differ by ±20 % in step time on this shared 2-core machine, more than the effects
measured, so the benches run the modes they compare in one process, in short blocks, in turn
(shuffled each round), and compare medians with a bootstrap interval.
"""
import random
import time

import numpy as np
import torch
import torch.nn as nn

BATCH = 8


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(x + self.body(x))


class ResNetStyle(nn.Module):
    """22 residual blocks of 16 channels on 16x16 images: about 3,700 torch.profiler events per
    training step (1.1 M in 300 steps, the issue's scale) at ~50 ms per step on one core."""

    def __init__(self, channels=16, blocks=22):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(*[ResidualBlock(channels) for _ in range(blocks)])
        self.head = nn.Linear(channels, 10)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def resnet_training(batches):
    """(model, optimizer, loader) on synthetic data; the loader yields ``batches`` batches per pass."""
    torch.manual_seed(0)
    model = ResNetStyle()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(batches * BATCH, 3, 16, 16), torch.randint(0, 10, (batches * BATCH,)))
    return model, optimizer, torch.utils.data.DataLoader(data, batch_size=BATCH)


def train_steps(model, optimizer, loader, loss_fn=nn.functional.cross_entropy):
    """One pass over the loader; the wall time of each step, fetch included (the first step of a
    pass pays the loader's start and is dropped)."""
    ends = [time.perf_counter()]
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        ends.append(time.perf_counter())
    return [b - a for a, b in zip(ends, ends[1:])][1:]


def interleave(modes, block, rounds):
    """Run ``block()`` under each mode in turn for ``rounds`` rounds; modes: {name: (enter, leave)}.
    Returns {name: [step seconds]} and {name: [block wall seconds, leave() included]}."""
    steps = {name: [] for name in modes}
    walls = {name: [] for name in modes}
    block()  # warm-up
    for _ in range(rounds):
        order = list(modes)
        random.shuffle(order)
        for name in order:
            enter, leave = modes[name]
            enter()
            began = time.perf_counter()
            steps[name] += block()
            leave()
            walls[name].append(time.perf_counter() - began)
    return steps, walls


def _interval(base, other, combine):
    """combine(median(other), median(base)) with a bootstrap 95 % interval (compare.bootstrap)."""
    from msprof_agent.compare import bootstrap

    rng = np.random.default_rng(0)
    base, other = np.asarray(base), np.asarray(other)
    low, high = np.percentile(combine(bootstrap(other, "p50", rng), bootstrap(base, "p50", rng)), [2.5, 97.5])
    return float(combine(np.median(other), np.median(base))), float(low), float(high)


def median_ratio(base, other):
    """median(other) / median(base) with a bootstrap 95 % interval."""
    return _interval(base, other, np.divide)


def median_difference(base, other):
    """median(other) - median(base) with a bootstrap 95 % interval."""
    return _interval(base, other, np.subtract)
