"""LeNet-5 on synthetic MNIST-shaped data with MindSpore's Model.train: the bundled MindSpore example.

Small on purpose (about 20 steps of batch 32 on CPU) so it doubles as the integration test's workload.
Run it unmodified under the agent:

    MS_PROFILER_OPTIONS='{"start": true, "output_path": "/tmp/prof"}' \\
        PYTHONPATH=sitecustomize_hook python examples/mindspore_lenet.py

``--data-sleep-ms`` sleeps in the generator so data loading becomes visible as step wait.
"""
import argparse
import time

import numpy as np

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Callback, Model


class LeNet5(nn.Cell):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_classes)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class SyntheticMnist:
    """Random 1x32x32 images with labels; ``sleep_ms`` per sample simulates slow data loading."""

    def __init__(self, size, sleep_ms=0.0, seed=0):
        rng = np.random.default_rng(seed)
        self.images = rng.standard_normal((size, 1, 32, 32)).astype(np.float32)
        self.labels = rng.integers(0, 10, size).astype(np.int32)
        self.sleep_s = sleep_ms / 1000.0

    def __getitem__(self, index):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.images[index], np.asarray(self.labels[index])

    def __len__(self):
        return len(self.labels)


def make_dataset(steps, batch_size, batch_sleep_ms=0.0, seed=0):
    """``batch_sleep_ms`` is spread over the batch's samples so one batch costs that much extra."""
    source = SyntheticMnist(steps * batch_size, batch_sleep_ms / batch_size, seed)
    data = ds.GeneratorDataset(source, ["image", "label"], shuffle=False, num_parallel_workers=1,
                               python_multiprocessing=False)
    return data.batch(batch_size, drop_remainder=True)


class StepPrinter(Callback):
    """The script's own per-step output, which the profiler must leave intact."""

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        print(f"epoch {cb.cur_epoch_num} step {cb.cur_step_num} loss {float(cb.net_outputs.asnumpy()):.4f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sink", action="store_true", help="dataset_sink_mode=True (CPU trains without sinking)")
    parser.add_argument("--sink-size", type=int, default=-1)
    parser.add_argument("--data-sleep-ms", type=float, default=0.0, help="extra loading time per batch")
    parser.add_argument("--pynative", action="store_true")
    parser.add_argument("--eval", action="store_true", help="run model.eval on a small dataset after training")
    parser.add_argument("--quiet", action="store_true", help="no per-step lines (for the overhead benchmark)")
    args = parser.parse_args()

    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE if args.pynative else ms.GRAPH_MODE)
    ms.set_seed(1)
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=loss, optimizer=opt, metrics={"acc"})
    train = make_dataset(args.steps, args.batch_size, args.data_sleep_ms)
    start = time.perf_counter()
    model.train(args.epochs, train, callbacks=[] if args.quiet else [StepPrinter()],
                dataset_sink_mode=args.sink, sink_size=args.sink_size)
    print(f"trained {args.epochs} epoch(s) x {args.steps} steps in {time.perf_counter() - start:.2f} s", flush=True)
    if args.eval:
        result = model.eval(make_dataset(3, args.batch_size, seed=1), dataset_sink_mode=False)
        print(f"eval {result}", flush=True)


if __name__ == "__main__":
    main()
