"""A small real PyTorch training loop whose misbehaviour the foundation tests choose by flag."""
import argparse
import os
import signal
import sys
import time

import torch

import tiny_model

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--sleep-ms", type=float, default=0.0, help="sleep inside each step")
parser.add_argument("--spin-ms", type=float, default=0.0, help="CPU-bound host work inside each step: a busy loop until this thread used that much CPU time")
parser.add_argument("--slow-at", type=int, default=0, help="this step sleeps --slow-ms instead")
parser.add_argument("--slow-ms", type=float, default=300.0)
parser.add_argument("--raise-at", type=int, default=0, help="raise RuntimeError at this step")
parser.add_argument("--sigterm-at", type=int, default=0, help="send SIGTERM to itself at this step")
parser.add_argument("--sigkill-at", type=int, default=0, help="send SIGKILL to itself at this step")
parser.add_argument("--fork-at", type=int, default=0, help="fork a child at this step; the child exits normally")
parser.add_argument("--fill-disk", default=None, help="a folder whose disk this job fills at --fill-at and frees at --free-at")
parser.add_argument("--fill-at", type=int, default=0)
parser.add_argument("--free-at", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--os-exit", action="store_true", help="leave through os._exit(--exit-code), as some launchers do")
args = parser.parse_args()

model, optimizer, loader = tiny_model.make(args.steps)

for step, (x, y) in enumerate(loader, 1):
    if step == args.raise_at:
        raise RuntimeError(f"injected failure at step {step}")
    if step == args.sigterm_at:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    if step == args.sigkill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if args.fill_disk and step in (args.fill_at, args.free_at):
        ballast = os.path.join(args.fill_disk, "ballast")
        if step == args.free_at:
            os.remove(ballast)
        else:  # a checkpoint that fills the disk to the last byte
            fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            for size in (1 << 20, 4096, 1):
                try:
                    while os.write(fd, b"\0" * size):
                        pass
                except OSError:
                    pass
            os.close(fd)
    if step == args.fork_at:
        pid = os.fork()
        if pid == 0:
            print("child done", flush=True)
            sys.exit(7)  # a normal exit runs atexit in the child: it must write nothing, and keep its status
        print(f"child status {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}", flush=True)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    pause = args.slow_ms if step == args.slow_at else args.sleep_ms
    if pause:
        time.sleep(pause / 1000)
    spin_until = time.thread_time() + args.spin_ms / 1000  # a fixed amount of work: waiting for a core stretches it
    while time.thread_time() < spin_until:
        pass
    optimizer.step()
print(f"trained {step} steps", flush=True)
if args.os_exit:
    os._exit(args.exit_code)
sys.exit(args.exit_code)
