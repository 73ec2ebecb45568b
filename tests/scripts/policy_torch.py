"""A PyTorch loop for the capture-policy tests: fixed host time per step, one injected slow step."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--sleep-ms", type=float, default=10.0)
parser.add_argument("--slow-at", type=int, default=0, help="this step sleeps --slow-ms instead")
parser.add_argument("--slow-ms", type=float, default=300.0)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(args.steps * 8, 16), torch.randn(args.steps * 8, 1))
for step, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_size=8), 1):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    time.sleep((args.slow_ms if step == args.slow_at else args.sleep_ms) / 1000)
    optimizer.step()
print(f"trained {step} steps", flush=True)
