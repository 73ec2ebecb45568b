"""The seed's Method 1 conditional loop on PyTorch: Profiler(start_profile=False), start at i==START, stop at i==STOP."""
import sys

import torch

import tiny_model
from msprof_agent import Profiler

out, steps, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model, optimizer, loader = tiny_model.make(steps)


def train(x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


profiler = Profiler(start_profile=False, output_path=out)
for i, (x, y) in enumerate(loader):
    train(x, y)
    if i == start:
        profiler.start()
    if i == stop:
        profiler.stop()
profiler.analyse()
print("done", flush=True)
