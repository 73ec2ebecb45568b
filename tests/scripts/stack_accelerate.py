"""The documented Hugging Face accelerate loop (Accelerator(cpu=True).prepare, accelerator.backward) over a
DataLoader, for the advisor's third-party scenarios, with one injected cause: a slow ``__getitem__``,
host work in the loop, a periodic pause, or a real leak (a list keeping each step's output tensor)."""
import time

import torch
from accelerate import Accelerator
from stack_common import Samples, arguments

parser = arguments(__doc__, 40)
parser.add_argument("--loop-ms", type=float, default=0.0, help="host work in the loop, per step")
parser.add_argument("--pause-every", type=int, default=0)
parser.add_argument("--pause-ms", type=float, default=0.0)
parser.add_argument("--leak", action="store_true", help="keep each step's output tensor (2 MiB) in a list")
parser.add_argument("--sleep-rank", type=int, default=-1, help="under torchrun: this rank sleeps --sleep-ms in its loop each step")
parser.add_argument("--sleep-ms", type=float, default=0.0)
args = parser.parse_args()
BATCH, WIDTH = 64, 8192  # the output: 64 x 8192 floats = 2 MiB a step


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(32, WIDTH)
    head = torch.nn.Linear(WIDTH, 1)
    optimizer = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.001)
    samples = Samples((torch.randn(args.steps * BATCH, 32), torch.randn(args.steps * BATCH, 1)), args.sample_ms)
    loader = torch.utils.data.DataLoader(samples, batch_size=BATCH, num_workers=args.workers)
    model, head, optimizer, loader = accelerator.prepare(model, head, optimizer, loader)
    kept = []
    for step, (x, y) in enumerate(loader, 1):
        out = model(x)
        loss = torch.nn.functional.mse_loss(head(out), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if args.leak:
            kept.append(out)
        if args.loop_ms:
            time.sleep(args.loop_ms / 1000)
        if args.pause_every and step % args.pause_every == 0:
            time.sleep(args.pause_ms / 1000)
        if accelerator.process_index == args.sleep_rank:
            time.sleep(args.sleep_ms / 1000)
    print(f"trained {step} steps, kept {len(kept)} outputs", flush=True)


if __name__ == "__main__":
    main()
