"""LeNet-5 trained by a functional custom loop (value_and_grad), GRAPH (``@ms.jit``) or PYNATIVE.

Each epoch iterates ``create_tuple_iterator`` to the end; ``--eval-every`` also iterates a second,
evaluation dataset inside the loop, which the profiler must not count as training steps.
``--between-sleep-ms`` sleeps after each step's compute (host work between steps).
"""
import argparse
import json
import time

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn

from mindspore_lenet import LeNet5, make_dataset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data-sleep-ms", type=float, default=0.0, help="extra loading time per batch")
    parser.add_argument("--data-on-demand", action="store_true",
                        help="dataset debug mode: batches are made when fetched, not prefetched in the background")
    parser.add_argument("--between-sleep-ms", type=float, default=0.0, help="host sleep after each step")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate on 2 batches every N steps")
    args = parser.parse_args()

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(1)
    ds.config.set_debug_mode(args.data_on_demand)
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)

    def forward(images, labels):
        return loss_fn(net(images), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(images, labels):
        loss, grads = grad_fn(images, labels)
        optimizer(grads)
        return loss

    if args.mode == "graph":
        train_step = ms.jit(train_step)

    train, source = make_dataset(args.steps, args.batch_size, args.data_sleep_ms)
    evaluation, _ = make_dataset(2, args.batch_size, seed=1)
    step = 0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        for images, labels in train.create_tuple_iterator():
            loss = train_step(images, labels)
            step += 1
            print(f"epoch {epoch} step {step} loss {float(loss.asnumpy()):.4f}", flush=True)
            if args.between_sleep_ms:
                time.sleep(args.between_sleep_ms / 1000.0)
            if args.eval_every and step % args.eval_every == 0:
                correct = sum(int((net(x).argmax(1).asnumpy() == y.asnumpy()).sum())
                              for x, y in evaluation.create_tuple_iterator())
                print(f"eval at step {step}: {correct} correct", flush=True)
    print(f"trained {args.epochs} epoch(s) x {args.steps} steps in {time.perf_counter() - start:.2f} s", flush=True)
    if args.data_sleep_ms:
        print("data_slept_ms " + json.dumps(source.slept_ms), flush=True)


if __name__ == "__main__":
    main()
