"""A deterministic PyTorch training that writes to stdout and stderr every step: from Python, from
another thread, and straight to the file descriptors, so a test can compare its output byte for byte."""
import os
import sys
import threading

import torch

import tiny_model

STEPS = 12
model, optimizer, loader = tiny_model.make(STEPS)


def from_a_thread(step):
    print(f"thread says step {step}", flush=True)


for step, (x, y) in enumerate(loader, 1):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    print(f"step {step} on stderr", file=sys.stderr, flush=True)
    os.write(1, f"fd 1 step {step}\n".encode())
    os.write(2, f"fd 2 step {step}\n".encode())
    helper = threading.Thread(target=from_a_thread, args=(step,))
    helper.start()
    helper.join()
print("done", flush=True)
