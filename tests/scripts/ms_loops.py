"""A tiny MindSpore functional loop (value_and_grad; ``@ms.jit`` in GRAPH) or an inference loop, with
host sleeps injected where the step-boundary tests look for them; prints each step's own timing."""
import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from injected import InjectedWork
from mindspore import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--feed", choices=("iterator", "tensors"), default="tensors")
    parser.add_argument("--infer", action="store_true", help="forwards only, no optimizer")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--before-ms", type=float, default=0.0, help="host work in the step before the forward")
    parser.add_argument("--between-ms", type=float, default=0.0, help="host work between backward and update (PYNATIVE)")
    parser.add_argument("--after-ms", type=float, default=0.0, help="host work after the step")
    args = parser.parse_args()

    work = InjectedWork()

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(1)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4))
    loss_fn = nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(x, y):
        if args.mode == "pynative":
            work.sleep("before", args.before_ms)
        loss, grads = grad_fn(x, y)
        if args.mode == "pynative":
            work.sleep("between", args.between_ms)
        optimizer(grads)
        return loss

    if args.mode == "graph":
        train_step = ms.jit(train_step)

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((8, 4), dtype=np.float32))
               for _ in range(args.steps)]
    if args.feed == "iterator":
        feed = (ds.NumpySlicesDataset((np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])), column_names=["x", "y"],
                                       shuffle=False).batch(8).create_tuple_iterator())
    else:
        feed = ((ms.Tensor(x), ms.Tensor(y)) for x, y in batches)
    for x, y in feed:
        if args.mode == "graph" or args.infer:
            work.sleep("before", args.before_ms)
        out = net(x) if args.infer else train_step(x, y)
        out.asnumpy()
        work.step_done()
        work.sleep("after", args.after_ms)
    work.report()


if __name__ == "__main__":
    main()
