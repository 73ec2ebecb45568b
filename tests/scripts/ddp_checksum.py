"""A 2-rank DDP training (gloo) of a model with BatchNorm buffers, its gradients all-reduced by a hook
registered after construction (ARGV[1]: "fp16", the built-in FP16_COMPRESS, or "python", torch's
allreduce_hook); rank 0 prints the trained parameters' exact values, to compare runs with and without the agent."""
import gc
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
ddp = torch.nn.parallel.DistributedDataParallel(model)
if sys.argv[1] == "fp16":
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
else:
    ddp.register_comm_hook(None, allreduce_hook)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
data = torch.Generator().manual_seed(100 + rank)
for _ in range(6):
    x, y = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
if rank == 0:
    print("parameters", [p.double().flatten().tolist() for p in model.parameters()] + [model[1].running_mean.tolist()])
# DDP's reducer and the works its comm hook returned go before the process group, while the interpreter is whole:
# left to its finalization, gloo aborted one rank in ten here ("terminate called without an active exception").
del ddp, optimizer
gc.collect()
dist.destroy_process_group()
