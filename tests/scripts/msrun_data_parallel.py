"""A data-parallel MindSpore training as ``msrun --worker_num 2 --local_worker_num 2`` launches it on CPU:
``init()`` (MSCCL's world group), ``DATA_PARALLEL`` with gradients averaged, ``Model.train`` on a small
network, so ``DistributedGradReducer`` runs an ``AllReduce`` per step inside the compiled step."""
import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(1)
    rng = np.random.default_rng(get_rank())
    x = rng.standard_normal((args.steps * 4, 16), dtype=np.float32)
    y = rng.standard_normal((args.steps * 4, 1), dtype=np.float32)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4, drop_remainder=True)
    net = nn.SequentialCell(nn.Dense(16, 16), nn.ReLU(), nn.Dense(16, 1))
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    model.train(1, dataset, dataset_sink_mode=False)
    print(f"trained rank {get_rank()} of {get_group_size()}", flush=True)


if __name__ == "__main__":
    main()
