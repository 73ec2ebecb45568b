"""A small PyTorch training with one injected cause of known size, for the advisor's scenarios; prints
each step's own timing (``script_steps``: the job's clock, the baseline an injected cost is read on).

``--closure`` runs forward and backward inside ``optimizer.step(closure)`` as PyTorch Lightning does,
so torch's ``Optimizer.step#SGD.step`` range holds the whole step.
"""
import torch
from injected import InjectedWork
from injected_causes import after_step, costly_sample, parser, python_in_forward, slow_data_source

parse = parser(__doc__.splitlines()[0])
parse.add_argument("--forward-ms", type=float, default=0.0, help="Python work inside the model's forward, per step")
parse.add_argument("--big-op", type=int, default=0, help="a square matmul of this size in the forward")
parse.add_argument("--grow-mb", type=float, default=0.0, help="memory kept per step")
parse.add_argument("--grow-objects", type=int, default=0, help="small Python objects kept per step (tuples of an int and a float)")
parse.add_argument("--closure", action="store_true")
parse.add_argument("--depth", type=int, default=0, help="hidden layers more: many small ops, a large profiler buffer a step")
parse.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
parse.add_argument("--batch", type=int, default=0, help="samples per batch (0: the dataset gives whole batches)")
parse.add_argument("--sample-ms", type=float, default=0.0, help="__getitem__ sleeps this long per sample")
parse.add_argument("--sample-cpu-ms", type=float, default=0.0, help="__getitem__ computes this long per sample (CPU time)")
args = parse.parse_args()


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return args.steps * (args.batch or 1)

    def __getitem__(self, index):
        if args.data_ms:
            slow_data_source(args.data_ms)
        if args.batch:
            slow_data_source(args.sample_ms)
            costly_sample(args.sample_cpu_ms)
            return torch.randn(16), torch.randn(1)
        return torch.randn(8, 16), torch.randn(8, 1)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        hidden = [layer for _ in range(args.depth) for layer in (torch.nn.Linear(32, 32), torch.nn.ReLU())]
        self.layers = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), *hidden, torch.nn.Linear(32, 1))
        self.big = torch.randn(args.big_op, args.big_op) if args.big_op else None

    def forward(self, x):
        if args.forward_ms:
            python_in_forward(args.forward_ms)
        if self.big is not None:
            x = x + torch.mm(self.big, self.big).mean()
        return self.layers(x)


torch.manual_seed(0)
torch.set_num_threads(1)
model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(Batches(), batch_size=args.batch or None, num_workers=args.workers)
kept = []
work = InjectedWork()


def forward_backward(x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step, (x, y) in enumerate(loader, 1):
    if args.closure:
        optimizer.step(lambda: forward_backward(x, y))  # noqa: B023 (called at once, inside this iteration)
    else:
        forward_backward(x, y)
        optimizer.step()
    after_step(args, step)
    if args.grow_mb:
        kept.append(torch.ones(int(args.grow_mb * (1 << 20) / 4)))
    kept.extend((step * args.grow_objects + i, float(i)) for i in range(args.grow_objects))
    work.step_done()
print(f"trained {step} steps", flush=True)
work.report()
