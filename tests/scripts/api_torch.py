"""The seed's Method 1 conditional loop on PyTorch: Profiler(start_profile=False), start at i==START, stop at i==STOP."""
import sys

import torch

from msprof_agent import Profiler

out, steps, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 16), torch.randn(steps * 8, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)


def train(x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


profiler = Profiler(start_profile=False, output_path=out)
for i, (x, y) in enumerate(loader):
    train(x, y)
    if i == start:
        profiler.start()
    if i == stop:
        profiler.stop()
profiler.analyse()
print("done", flush=True)
