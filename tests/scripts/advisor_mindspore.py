"""A small MindSpore training (custom loop, GRAPH mode) with one injected cause of known size, for the
advisor's scenarios. With ``--data-ms`` the dataset runs in debug mode: batches are made when fetched,
so the step waits the source's whole time, not what background prefetching leaves of it."""
import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from injected_causes import after_step, parser, slow_data_source
from mindspore import nn

args = parser(__doc__.splitlines()[0]).parse_args()


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
    after_step(args, step)
print(f"trained {step} steps", flush=True)
