"""A PyTorch training whose steps wait on a lock and label a region after a Python object: under
torch's own Python stack events both gave op names with memory addresses."""
import queue
import threading

import torch

import tiny_model

model, optimizer, loader = tiny_model.make(6)
answers = queue.Queue()
for x, y in loader:
    threading.Thread(target=answers.put, args=(1,)).start()
    answers.get()  # waits on a _thread.lock
    with torch.profiler.record_function(f"metric {object()}"):  # "metric <object object at 0x7f...>"
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print("trained", flush=True)
