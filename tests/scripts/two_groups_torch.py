"""A 2-rank torchrun/gloo training loop whose collectives run on two process groups: one large all-reduce a
step on a group of both ranks made with ``new_group`` (as a tensor- or pipeline-parallel group is made), then
the gradients' all-reduces on the default group, so the cluster step has two groups to compare. The large one
comes first in the step, so the wait for a rank that comes late (``--late-ms``) is in it."""
import argparse
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--side-floats", type=int, default=4 << 20, help="the side group's all-reduce, floats a step")
parser.add_argument("--late-rank", type=int, default=1)
parser.add_argument("--late-ms", type=float, default=0.0, help="the late rank sleeps this long before the side group's all-reduce")
args = parser.parse_args()

dist.init_process_group("gloo")
side = dist.new_group([0, 1])
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
exchanged = torch.ones(args.side_floats)
for _ in range(args.steps):
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if rank == args.late_rank and args.late_ms:
        time.sleep(args.late_ms / 1000)
    dist.all_reduce(exchanged, group=side)  # first: a rank that closed its last step late (a profiler hand-over) is waited for here
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
    optimizer.step()
    optimizer.zero_grad()
if rank == 0:
    print(f"side group {side.group_name}", flush=True)
dist.destroy_process_group()
