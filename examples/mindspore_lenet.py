"""LeNet-5 on synthetic MNIST-shaped data with MindSpore's Model.train: the bundled MindSpore example.

Small on purpose (about 20 steps of batch 32 on CPU) so it doubles as the integration test's workload.
Run it unmodified under the agent:

    MS_PROFILER_OPTIONS='{"start": true, "output_path": "/tmp/prof"}' \\
        PYTHONPATH=sitecustomize_hook python examples/mindspore_lenet.py

``--data-sleep-ms`` sleeps in the generator so data loading becomes visible as step wait.
"""
import argparse
import json
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
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
    """Random 1x32x32 images with labels; the first sample of each batch sleeps ``batch_sleep_ms``
    (one sleep, not one per sample, so the extra loading time per batch is close to exact)."""

    def __init__(self, size, batch_size, batch_sleep_ms=0.0, seed=0):
        rng = np.random.default_rng(seed)
        self.images = rng.standard_normal((size, 1, 32, 32)).astype(np.float32)
        self.labels = rng.integers(0, 10, size).astype(np.int32)
        self.batch_size = batch_size
        self.sleep_s = batch_sleep_ms / 1000.0
        self.slept_ms = []  # what each sleep really took: the ground truth for the profiler's data wait

    def __getitem__(self, index):
        if self.sleep_s and index % self.batch_size == 0:
            start = time.perf_counter()
            time.sleep(self.sleep_s)
            self.slept_ms.append(round((time.perf_counter() - start) * 1000, 3))
        return self.images[index], np.asarray(self.labels[index])

    def __len__(self):
        return len(self.labels)


def make_dataset(steps, batch_size, batch_sleep_ms=0.0, seed=0):
    """The batched dataset and its source (whose ``slept_ms`` the scripts print)."""
    source = SyntheticMnist(steps * batch_size, batch_size, batch_sleep_ms, seed)
    data = ds.GeneratorDataset(source, ["image", "label"], shuffle=False, num_parallel_workers=1,
                               python_multiprocessing=False)
    return data.batch(batch_size, drop_remainder=True), source


class StepClock(Callback):
    """Wall time between step ends, for the overhead benchmark (``--step-times``)."""

    def __init__(self):
        super().__init__()
        self.ends = [time.perf_counter()]

    def on_train_step_end(self, run_context):
        self.ends.append(time.perf_counter())

    def durations_ms(self):
        return [round((b - a) * 1000, 3) for a, b in zip(self.ends, self.ends[1:])]


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
    parser.add_argument("--data-on-demand", action="store_true",
                        help="dataset debug mode: batches are made when fetched, not prefetched in the background")
    parser.add_argument("--pynative", action="store_true")
    parser.add_argument("--eval", action="store_true", help="run model.eval on a small dataset after training")
    parser.add_argument("--quiet", action="store_true", help="no per-step lines")
    parser.add_argument("--step-times", action="store_true", help="print the step durations as one JSON line")
    args = parser.parse_args()

    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE if args.pynative else ms.GRAPH_MODE)
    ds.config.set_debug_mode(args.data_on_demand)
    ms.set_seed(1)
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=loss, optimizer=opt, metrics={"acc"})
    train, source = make_dataset(args.steps, args.batch_size, args.data_sleep_ms)
    clock = StepClock()
    start = time.perf_counter()
    model.train(args.epochs, train, callbacks=([] if args.quiet else [StepPrinter()]) + [clock],
                dataset_sink_mode=args.sink, sink_size=args.sink_size)
    print(f"trained {args.epochs} epoch(s) x {args.steps} steps in {time.perf_counter() - start:.2f} s", flush=True)
    if args.data_sleep_ms:
        print("data_slept_ms " + json.dumps(source.slept_ms), flush=True)
    if args.step_times:
        print("step_times_ms " + json.dumps(clock.durations_ms()), flush=True)
    if args.eval:
        result = model.eval(make_dataset(3, args.batch_size, seed=1)[0], dataset_sink_mode=False)
        print(f"eval {result}", flush=True)


if __name__ == "__main__":
    main()
