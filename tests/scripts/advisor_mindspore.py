"""A small MindSpore training (custom loop, GRAPH mode) with one injected cause of known size, for the
advisor's scenarios. With ``--data-ms`` the dataset runs in debug mode: batches are made when fetched,
so the step waits the source's whole time, not what background prefetching leaves of it."""
import argparse
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=16)
parser.add_argument("--data-ms", type=float, default=0.0, help="the data source sleeps this long per batch")
parser.add_argument("--loop-ms", type=float, default=0.0, help="Python work in the training loop, per step")
parser.add_argument("--pause-every", type=int, default=0)
parser.add_argument("--pause-ms", type=float, default=0.0)
args = parser.parse_args()


def slow_data_source(ms_):
    time.sleep(ms_ / 1000)


def host_work_in_loop(ms_):
    time.sleep(ms_ / 1000)


def periodic_pause(ms_):
    time.sleep(ms_ / 1000)


class Batches:
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return args.steps

    def __getitem__(self, index):
        if args.data_ms:
            slow_data_source(args.data_ms)
        return self.rng.standard_normal((8, 16), dtype=np.float32), self.rng.standard_normal((8, 1), dtype=np.float32)


ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)
ms.set_seed(1)
ds.config.set_debug_mode(bool(args.data_ms))
net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 1))
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
loss_fn = nn.MSELoss()


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)


@ms.jit
def train_step(x, y):
    loss, grads = grad_fn(x, y)
    optimizer(grads)
    return loss


dataset = ds.GeneratorDataset(Batches(), ["x", "y"], shuffle=False, num_parallel_workers=1, python_multiprocessing=False)
step = 0
for x, y in dataset.create_tuple_iterator():
    train_step(x, y)
    step += 1
    if args.loop_ms:
        host_work_in_loop(args.loop_ms)
    if args.pause_every and step % args.pause_every == 0:
        periodic_pause(args.pause_ms)
print(f"trained {step} steps", flush=True)
