"""A small CNN trained on synthetic tensors: the unmodified PyTorch script the agent is tested on.

Each dataset item is a whole batch (DataLoader with ``batch_size=None``), so ``--data-sleep-ms``
is a sleep per batch in ``Dataset.__getitem__``, wherever the loader runs it (main process or worker).
Under torchrun (WORLD_SIZE > 1) the ranks join a gloo group and all-reduce their gradients
(explicitly, or through DistributedDataParallel with ``--ddp``).
``--torch-profiler FILE`` wraps the training loop in torch.profiler itself and writes its op counts,
the reference the agent's op tables are checked against.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

BATCH = 8


class SyntheticBatches(Dataset):
    def __init__(self, length, sleep_ms, seed=0):
        self.length, self.sleep_ms, self.seed = length, sleep_ms, seed

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1000)
        gen = torch.Generator().manual_seed(self.seed * 100_003 + index)
        return torch.randn(BATCH, 3, 16, 16, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="batches per epoch (micro-batches with --accumulate)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--mp-context", choices=("fork", "spawn"), default=None, help="worker start method")
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate after every N optimizer steps and at each epoch end")
    p.add_argument("--two-optimizers", action="store_true", help="head and features stepped by separate optimizers")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--ddp", action="store_true", help="with WORLD_SIZE > 1: DistributedDataParallel instead of explicit all_reduce")
    p.add_argument("--sleep-rank", type=int, default=-1)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--stop-rank", type=int, default=-1, help="this rank stops for good (sleeps) before --stop-step's forward")
    p.add_argument("--stop-step", type=int, default=0)
    p.add_argument("--torch-profiler", default=None, help="write torch.profiler's own op counts to this JSON file")
    return p.parse_args(argv)


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(1) == y).sum())
    model.train()
    return correct


def train(args, rank, world):
    torch.manual_seed(0)
    model = SmallCNN()
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 and args.ddp else model
    loss_fn = nn.CrossEntropyLoss()
    if args.two_optimizers:
        optimizers = [torch.optim.SGD(model.features.parameters(), lr=0.01), torch.optim.SGD(model.head.parameters(), lr=0.01)]
    else:
        optimizers = [torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)]
    loader = DataLoader(SyntheticBatches(args.steps, args.data_sleep_ms, seed=rank), batch_size=None, shuffle=False,
                        num_workers=args.workers, multiprocessing_context=args.mp_context if args.workers else None)
    eval_loader = DataLoader(SyntheticBatches(3, 0, seed=99), batch_size=None)
    optimizer_steps = 0
    for _epoch in range(args.epochs):
        for index, (x, y) in enumerate(loader):
            if rank == args.sleep_rank and args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
            if rank == args.stop_rank and index + 1 == args.stop_step:
                time.sleep(3600)  # a hung rank: the others wait for it in the step's first collective
            loss = loss_fn(net(x), y) / args.accumulate
            loss.backward()
            if (index + 1) % args.accumulate:
                continue
            if world > 1 and not args.ddp:
                for param in model.parameters():
                    torch.distributed.all_reduce(param.grad)
                    param.grad /= world
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
            optimizer_steps += 1
            if args.eval_every and optimizer_steps % args.eval_every == 0:
                evaluate(model, eval_loader)
        if args.eval_every:
            evaluate(model, eval_loader)
    return optimizer_steps


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
            steps = train(args, rank, world)
        counts = {e.key: e.count for e in prof.key_averages()}
        with open(args.torch_profiler, "w") as handle:
            json.dump({"steps": steps, "counts": counts}, handle)
    else:
        steps = train(args, rank, world)
    print(f"rank {rank}: {steps} optimizer steps", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
