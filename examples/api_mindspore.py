"""The MindSpore Profiler guide's Method 1 examples, unchanged apart from ``from msprof_agent import Profiler``.

    python examples/api_mindspore.py --example conditional --output /tmp/prof
    python examples/api_mindspore.py --example stop_at_step|stop_at_epoch|functional|model_train

``conditional`` is the custom loop that starts at ``i == start`` and stops at ``i == stop``;
``stop_at_step`` / ``stop_at_epoch`` are the guide's callbacks (output per rank in
``profiler_data/rank_{id}``, relative to ``--output``); ``functional`` and ``model_train`` profile
the whole run (Examples 1 and 2 of "Unconditional Open").
"""
import argparse
import os

import numpy as np

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.communication import get_rank
from mindspore.train import Model

from msprof_agent import Profiler

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--example", required=True, choices=("conditional", "stop_at_step", "stop_at_epoch", "functional", "model_train"))
parser.add_argument("--output", default=".")
parser.add_argument("--samples", type=int, default=12, help="samples (= steps) per epoch")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--start", type=int, default=3)
parser.add_argument("--stop", type=int, default=6)
args = parser.parse_args()
os.chdir(args.output)


class Net(nn.Cell):
    def __init__(self):
        super(Net, self).__init__()
        self.fc = nn.Dense(2, 2)

    def construct(self, x):
        return self.fc(x)


def generator():
    for i in range(args.samples):
        yield (np.ones([2, 2]).astype(np.float32), np.ones([2]).astype(np.int32))


def get_real_rank():
    """get rank id"""
    try:
        return get_rank()
    except RuntimeError:
        return int(os.getenv("RANK_ID", "0"))


class StopAtStep(ms.Callback):
    def __init__(self, start_step, stop_step):
        super(StopAtStep, self).__init__()
        self.start_step = start_step
        self.stop_step = stop_step
        # Set the path for performance data to disks as rank_id
        rank_id = get_real_rank()
        output_path = os.path.join("profiler_data", f"rank_{rank_id}")
        self.profiler = Profiler(start_profile=False, output_path=output_path)

    def on_train_step_begin(self, run_context):
        cb_params = run_context.original_args()
        step_num = cb_params.cur_step_num
        if step_num == self.start_step:
            self.profiler.start()

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        step_num = cb_params.cur_step_num
        if step_num == self.stop_step:
            self.profiler.stop()
            self.profiler.analyse()


class StopAtEpoch(ms.Callback):
    def __init__(self, start_epoch, stop_epoch):
        super(StopAtEpoch, self).__init__()
        self.start_epoch = start_epoch
        self.stop_epoch = stop_epoch
        # Set the path for performance data to disks as rank_id
        rank_id = get_real_rank()
        output_path = os.path.join("profiler_data", f"rank_{rank_id}")
        self.profiler = Profiler(start_profile=False, output_path=output_path)

    def on_train_epoch_begin(self, run_context):
        cb_params = run_context.original_args()
        epoch_num = cb_params.cur_epoch_num
        if epoch_num == self.start_epoch:
            self.profiler.start()

    def on_train_epoch_end(self, run_context):
        cb_params = run_context.original_args()
        epoch_num = cb_params.cur_epoch_num
        if epoch_num == self.stop_epoch:
            self.profiler.stop()
            self.profiler.analyse()


def dataset():
    return ds.GeneratorDataset(generator, ["data", "label"], shuffle=False)


def model_train(net, callbacks=None):
    optimizer = nn.Momentum(net.trainable_params(), 1, 0.9)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    model = Model(net, loss, optimizer)
    model.train(args.epochs, dataset(), callbacks=callbacks, dataset_sink_mode=False)


def functional_parts(net):
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)

    def forward_fn(data, label):
        logits = net(data)
        loss = loss_fn(logits, label)
        return loss, logits

    # Get gradient function
    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    @ms.jit
    def train_step(data, label):
        """Define function of one-step training"""
        (loss, _), grads = grad_fn(data, label)
        optimizer(grads)
        return loss

    return train_step


if __name__ == '__main__':
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    net = Net()
    if args.example == "conditional":
        train_step = functional_parts(net)
        profiler = Profiler(start_profile=False)
        data_loader = dataset().create_dict_iterator()

        for i, data in enumerate(data_loader):
            train_step(data["data"], data["label"])
            if i == args.start:
                profiler.start()
            if i == args.stop:
                profiler.stop()

        profiler.analyse()
    elif args.example == "stop_at_step":
        model_train(net, [StopAtStep(args.start, args.stop)])
    elif args.example == "stop_at_epoch":
        model_train(net, [StopAtEpoch(args.start, args.stop)])
    elif args.example == "functional":
        # Init Profiler.
        # Note that the Profiler should be initialized before model training.
        profiler = Profiler(output_path="profiler_data")
        train_step = functional_parts(net)

        def train_loop(model, dataset, loss_fn, optimizer):
            for data, label in dataset.create_tuple_iterator():
                train_step(data, label)

        for t in range(args.epochs):
            train_loop(net, dataset(), None, None)

        profiler.analyse()
    else:
        # Init Profiler
        # Note that the Profiler should be initialized before model.train
        profiler = Profiler(output_path='./profiler_data')

        # Train Model
        model_train(net)

        # Profiler end
        profiler.analyse()
    print("done", flush=True)
