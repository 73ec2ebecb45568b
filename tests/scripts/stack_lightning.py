"""Lightning's ``Trainer.fit`` on a small LightningModule (an MLP) over a synthetic torch Dataset on the CPU,
for the advisor's third-party scenarios, with one injected cause: a slow ``__getitem__`` or host work
in ``on_train_batch_end``."""
import tempfile
import time
import warnings

import torch
from lightning import LightningModule, Trainer
from stack_common import Samples, arguments

parser = arguments(__doc__, 30)
parser.add_argument("--hook-ms", type=float, default=0.0, help="host work in on_train_batch_end, per step")
args = parser.parse_args()
BATCH, WIDTH = 32, 1024


def samples():
    generator = torch.Generator().manual_seed(0)
    return Samples((torch.randn(args.steps * BATCH, 64, generator=generator), torch.randn(args.steps * BATCH, 1, generator=generator)),
                   args.sample_ms)


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                       torch.nn.Linear(WIDTH, 1))

    def training_step(self, batch, batch_index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs, batch, batch_index):
        if args.hook_ms:
            time.sleep(args.hook_ms / 1000)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # Lightning's advice on num_workers and logging: not this test's output
    loader = torch.utils.data.DataLoader(samples(), batch_size=BATCH, num_workers=args.workers)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, default_root_dir=out)
        trainer.fit(Model(), loader)
    print(f"trained {trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
