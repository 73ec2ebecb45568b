"""The MindSpore Profiler guide's Method 3 Example 1 (Model.train with DynamicProfilerMonitor), unchanged apart from
the import (``from msprof_agent import DynamicProfilerMonitor``) and CPU as the device target.

    python examples/api_dynamic_mindspore.py --cfg ./dyn_cfg --output ./dynprof_data
    # while it runs, edit ./dyn_cfg/profiler_config.json, e.g. "start_step": 10, "stop_step": 12, "analyse_mode": 0

``--edit STEP:TEXT`` makes such an edit from inside the run at the end of step STEP (for the tests).
"""
import argparse
import os
import sys
import time

import numpy as np
from mindspore import nn
from mindspore.train import Callback, Model
import mindspore as ms
import mindspore.dataset as ds

from msprof_agent import DynamicProfilerMonitor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--cfg", default="./dyn_cfg")
parser.add_argument("--output", default="./dynprof_data")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--samples", type=int, default=2, help="samples (= steps) per epoch")
parser.add_argument("--sleep-ms", type=float, default=0.0, help="host time per step")
parser.add_argument("--edit", action="append", help="STEP:TEXT, written over the config file at the end of STEP")
args = parser.parse_args()


class Net(nn.Cell):
    def __init__(self):
        super(Net, self).__init__()
        self.fc = nn.Dense(2, 2)

    def construct(self, x):
        return self.fc(x)


def generator():
    for i in range(args.samples):
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        yield (np.ones([2, 2]).astype(np.float32), np.ones([2]).astype(np.int32))


class Editor(Callback):
    """Plays the person editing the file mid-run."""

    def __init__(self, edits):
        super().__init__()
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "scripts"))
        from config_editor import parse_edits

        self.edits = parse_edits(edits)

    def on_train_step_end(self, run_context):
        from config_editor import apply_edits

        apply_edits(self.edits, run_context.original_args().cur_step_num, args.cfg)


def train(net):
    optimizer = nn.Momentum(net.trainable_params(), 1, 0.9)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    data = ds.GeneratorDataset(generator, ["data", "label"])

    # The cfg_path parameter is the path to the folder where the configuration file is to be shared, which needs to be accessible by all nodes in a cluster scenario
    # The output_path parameter is the path where the dynamic profile data is saved.
    profile_callback = DynamicProfilerMonitor(cfg_path=args.cfg, output_path=args.output)
    model = Model(net, loss, optimizer)
    model.train(args.epochs, data, callbacks=([Editor(args.edit)] if args.edit else []) + [profile_callback])


if __name__ == '__main__':
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

    # Train Mode
    net = Net()
    train(net)
    print("done", flush=True)
