"""A model-zoo-style MindSpore training for the advisor's scenarios: a network built from a config,
``Model(net, loss, optimizer).train`` in GRAPH mode with the zoo's usual callbacks, fed by a
GeneratorDataset with a ``map`` and ``batch``. Many small layers make the step's time lie between
the compiled graph's ops (MindSpore's runtime launching each), not in Python: 128 of them put
12-17 ms there on today's 2-core runners, 2.4x the advisor's 5 ms floor and more (64 put 4.3-4.8 ms
there, below the floor, though ~20 ms on an older, slower runner). ``--callback-ms`` adds host work in a callback,
``--data-ms`` a slow source (the pipeline's queues then short, see ``main``)."""
import argparse
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Callback, LossMonitor, Model

CONFIG = {"width": 16, "depth": 128, "batch_size": 4, "lr": 0.01}


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--callback-ms", type=float, default=0.0, help="host work in a step-end callback")
    parser.add_argument("--data-ms", type=float, default=0.0, help="the source sleeps this long per sample")
    parser.add_argument("--depth", type=int, default=CONFIG["depth"], help="Dense layers (fewer: less runtime overhead)")
    return parser.parse_args()


class Source:
    def __init__(self, samples, data_ms):
        self.samples, self.data_ms = samples, data_ms
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return self.samples

    def __getitem__(self, index):
        if self.data_ms:
            time.sleep(self.data_ms / 1000)
        return self.rng.standard_normal(CONFIG["width"], dtype=np.float32), self.rng.standard_normal(1, dtype=np.float32)


def build_network(config):
    layers = []
    for _ in range(config["depth"]):
        layers += [nn.Dense(config["width"], config["width"]), nn.ReLU()]
    return nn.SequentialCell(*layers, nn.Dense(config["width"], 1))


class HostWorkInCallback(Callback):
    """A metric computed in Python at every step end, as zoo callbacks often do."""

    def __init__(self, ms_per_step):
        super().__init__()
        self.ms_per_step = ms_per_step

    def on_train_step_end(self, run_context):
        if self.ms_per_step:
            time.sleep(self.ms_per_step / 1000)


def main():
    args = parse()
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(1)
    batch = CONFIG["batch_size"]
    if args.data_ms:  # the pipeline's default queues (16 rows between ops) hold ~40 batches, made during the graph's compile
        ds.config.set_prefetch_size(2)  # (7-17 s here): short ones make the steps after the first few wait, as a long run's do
    dataset = ds.GeneratorDataset(Source(args.steps * batch, args.data_ms), ["x", "y"], shuffle=False, num_parallel_workers=1,
                                  python_multiprocessing=False)
    dataset = dataset.map(lambda x: x * 1.0, input_columns=["x"]).batch(batch, drop_remainder=True)
    net = build_network(dict(CONFIG, depth=args.depth))
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), learning_rate=CONFIG["lr"], momentum=0.9))
    model.train(1, dataset, callbacks=[LossMonitor(1000), HostWorkInCallback(args.callback_ms)], dataset_sink_mode=False)
    print("trained", flush=True)


if __name__ == "__main__":
    main()
