"""The seed's Method 1 conditional loop on PyTorch: Profiler(start_profile=False), start at i==START, stop at i==STOP.

A sixth argument ``inside`` calls start() inside step START+1 instead, between its backward and its
optimizer step (a window opened in the middle of a step).
"""
import sys

import torch

import tiny_model
from msprof_agent import Profiler

out, steps, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
inside = sys.argv[5:] == ["inside"]
model, optimizer, loader = tiny_model.make(steps)
profiler = Profiler(start_profile=False, output_path=out)


def train(i, x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if inside and i == start:
        profiler.start()
    optimizer.step()


for i, (x, y) in enumerate(loader):
    train(i, x, y)
    if i == start and not inside:
        profiler.start()
    if i == stop:
        profiler.stop()
profiler.analyse()
print("done", flush=True)
