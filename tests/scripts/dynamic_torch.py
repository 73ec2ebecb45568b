"""A PyTorch loop with the seed's DynamicProfilerMonitor (``monitor.step()`` each step) and scripted edits."""
import argparse
import sys
import time

import torch

import tiny_model
from config_editor import apply_edits, parse_edits
from msprof_agent import DynamicProfilerMonitor

parser = argparse.ArgumentParser()
parser.add_argument("--cfg", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep-ms", type=float, default=0.0)
parser.add_argument("--edit", action="append")
args = parser.parse_args()
edits = parse_edits(args.edit)

model, optimizer, loader = tiny_model.make(args.steps)

monitor = DynamicProfilerMonitor(cfg_path=args.cfg, output_path=args.out)
for step, (x, y) in enumerate(loader, 1):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if args.sleep_ms:
        time.sleep(args.sleep_ms / 1000)
    optimizer.step()
    apply_edits(edits, step, args.cfg)
    monitor.step()
print(f"trained {step} steps", flush=True)
sys.exit(0)
