"""A MindSpore custom loop that marks its own mstx ranges and, in step 2, writes with fsync and sends over
loopback; it prints what it did so that a test can hold the profiler's pages against it."""
import argparse
import collections
import json
import os
import socket
import threading

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.profiler import mstx


def _receiver():
    server = socket.create_server(("127.0.0.1", 0))

    def drain():
        connection, _ = server.accept()
        while connection.recv(1 << 16):
            pass
        connection.close()

    threading.Thread(target=drain, daemon=True).start()
    return server.getsockname()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--write-mb", type=int, default=0)
    parser.add_argument("--send-mb", type=int, default=0)
    parser.add_argument("--scratch", default=".")
    args = parser.parse_args()

    ms.set_device("CPU")
    ms.set_seed(1)
    net = nn.Dense(16, 4)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    def batches():
        rng = np.random.default_rng(0)
        for _ in range(args.steps):
            yield rng.standard_normal((8, 16)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int32)

    data = ds.GeneratorDataset(batches, ["x", "y"], shuffle=False, python_multiprocessing=False)
    address = _receiver() if args.send_mb else None
    ranges, marks = collections.Counter(), collections.Counter()
    for step, (x, y) in enumerate(data.create_tuple_iterator(), 1):
        range_id = mstx.range_start("compute", None, domain="train")
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        mstx.range_end(range_id, domain="train")
        ranges[("compute", "train")] += 1
        if step == 2 and (args.write_mb or args.send_mb):
            range_id = mstx.range_start("checkpoint io", None, domain="io")
            if args.write_mb:
                with open(os.path.join(args.scratch, "written.bin"), "wb") as handle:
                    for _ in range(args.write_mb):
                        handle.write(os.urandom(1 << 20))
                    handle.flush()
                    os.fsync(handle.fileno())
            if args.send_mb:
                with socket.create_connection(address) as client:
                    client.sendall(b"x" * (args.send_mb << 20))
            mstx.range_end(range_id, domain="io")
            ranges[("checkpoint io", "io")] += 1
        mstx.mark("step end")
        marks[("step end", "default")] += 1
        print(f"step {step} loss {float(loss.asnumpy()):.4f}", flush=True)
    print("mstx " + json.dumps({"ranges": [[*key, n] for key, n in sorted(ranges.items())],
                                "marks": [[*key, n] for key, n in sorted(marks.items())]}), flush=True)


if __name__ == "__main__":
    main()
