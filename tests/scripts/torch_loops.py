"""A tiny PyTorch training loop (optionally with gradient accumulation) or inference loop, with host
sleeps injected where the step-boundary tests look for them; prints each step's own timing."""
import argparse

import torch
from injected import InjectedWork

import tiny_model

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--infer", action="store_true", help="model.eval(), torch.no_grad(), forwards only")
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--before-ms", type=float, default=0.0, help="host work in the step before the forward")
parser.add_argument("--between-ms", type=float, default=0.0, help="host work between backward and update")
parser.add_argument("--after-ms", type=float, default=0.0, help="host work after the step")
args = parser.parse_args()

model, optimizer, loader = tiny_model.make(args.steps * args.accumulate)
work = InjectedWork()

if args.infer:
    model.eval()
    with torch.no_grad():
        for x, _ in loader:
            work.sleep("before", args.before_ms)
            model(x)
            work.step_done()
            work.sleep("after", args.after_ms)
else:
    for i, (x, y) in enumerate(loader, 1):
        if i % args.accumulate == 1 or args.accumulate == 1:
            optimizer.zero_grad()
            work.sleep("before", args.before_ms)
        torch.nn.functional.mse_loss(model(x), y).backward()
        if i % args.accumulate == 0:
            work.sleep("between", args.between_ms)
            optimizer.step()
            work.step_done()
            work.sleep("after", args.after_ms)
work.report()
