"""The tiny model under ``torch.compile`` for a few steps; prints its final loss exactly (the same with and
without the agent: the compiled graph must not change)."""
import argparse

import torch

import tiny_model

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

model, optimizer, loader = tiny_model.make(args.steps)
compiled = torch.compile(model)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(compiled(x), y)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item()!r}")
