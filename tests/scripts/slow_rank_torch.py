"""A torchrun/gloo training loop where one rank computes more each step (real matmuls, not a
sleep): its own Computing is larger while the collectives make every rank's step time equal.
For the live view: ``--busy-from`` turns the rank busy from that step on, ``--step-ms`` paces every
step with a sleep, and ``--stop-rank`` stops a rank ``--stop-s`` seconds before ``--stop-step``'s
forward (the others wait in that step's first all_reduce), after which it goes on."""
import argparse
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--busy-rank", type=int, default=1)
parser.add_argument("--busy-ms", type=float, default=150.0)
parser.add_argument("--busy-from", type=int, default=1)
parser.add_argument("--step-ms", type=float, default=0.0)
parser.add_argument("--stop-rank", type=int, default=-1)
parser.add_argument("--stop-step", type=int, default=0)
parser.add_argument("--stop-s", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
extra = torch.randn(128, 128)
for step in range(1, args.steps + 1):
    if rank == args.stop_rank and step == args.stop_step:
        time.sleep(args.stop_s)
    if args.step_ms:
        time.sleep(args.step_ms / 1000)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    if rank == args.busy_rank and step >= args.busy_from:
        until = time.perf_counter() + args.busy_ms / 1000
        while time.perf_counter() < until:
            extra = torch.tanh(extra @ extra)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
print(f"rank {rank} trained {args.steps} steps", flush=True)
