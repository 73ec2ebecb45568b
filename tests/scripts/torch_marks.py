"""A PyTorch loop with its own record_function ranges; prints how many it opened per name."""
import collections
import json

import torch

import tiny_model

model, optimizer, loader = tiny_model.make(5)
ranges = collections.Counter()
for step, (x, y) in enumerate(loader, 1):
    optimizer.zero_grad()
    with torch.profiler.record_function("forward+loss"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    ranges["forward+loss"] += 1
    loss.backward()
    if step % 2 == 0:
        with torch.profiler.record_function("every other step"):
            sum(p.abs().sum() for p in model.parameters())
        ranges["every other step"] += 1
    optimizer.step()
print("ranges " + json.dumps(sorted(ranges.items())), flush=True)
