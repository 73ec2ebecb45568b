"""A 2-rank torchrun/gloo training loop whose collectives run on two process groups: the gradients'
all-reduce on the default group, and one larger all-reduce a step on a group of both ranks made with
``new_group`` (as a tensor- or pipeline-parallel group is made), so the cluster step has two groups to compare."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--side-floats", type=int, default=4 << 20, help="the side group's all-reduce, floats a step")
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
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
    dist.all_reduce(exchanged, group=side)
    optimizer.step()
    optimizer.zero_grad()
if rank == 0:
    print(f"side group {side.group_name}", flush=True)
dist.destroy_process_group()
