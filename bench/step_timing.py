"""Cost of always-on step timing (no op collection), side by side with no agent, in one process.

Separate processes differ by ±20 % in step time on this shared 2-core machine, more than the
effect measured, so this alternates blocks of steps in one process, timed in the thread's own CPU
time (other processes preempting it are not the agent's cost): the PyTorch integration
installed (step boundaries, data waits and forward/backward markers recorded into the raw store;
the op window never opens) and uninstalled (plain torch). Prints median step times, the ratio
(target <= 1.005) and the absolute cost per step as the median of per-round paired differences,
which decides the ratio for other step lengths.
"""
import argparse
import statistics
import tempfile
import time


def _bookkeeping_cost(current, steps=20000):
    """What one step costs the session itself, without the framework around it."""
    began = time.perf_counter()
    for _ in range(steps):
        now = time.time_ns()
        current.steps.data_wait(now, now + 1000)
        current.steps.mark_fp(now)
        current.steps.mark_bp(now)
        current.steps.close(now + 5000)
    return (time.perf_counter() - began) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=50, help="steps per block")
    parser.add_argument("--width", type=int, default=512, help="MLP width: 512 gives steps of a few ms on one core")
    args = parser.parse_args()

    import torch

    from msprof_agent import options, session
    from msprof_agent.frameworks import torch as integration

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    data = torch.utils.data.TensorDataset(torch.randn(args.block * 64, args.width), torch.randn(args.block * 64, args.width))
    loader = torch.utils.data.DataLoader(data, batch_size=64)

    def block():
        ends = [time.thread_time()]
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            ends.append(time.thread_time())
        return [b - a for a, b in zip(ends, ends[1:])][1:]  # the first step of a block pays the loader's start

    with tempfile.TemporaryDirectory() as out_dir:
        current = session.start(options.from_mapping({"start": True, "output_path": out_dir, "start_step": 10 ** 9}), origin="bench")
        samples = {"no agent": [], "agent, step timing only": []}
        paired = []  # per round: median with agent - median without, so slow drifts of the machine cancel
        block()  # warm-up
        for _ in range(args.rounds):
            plain = block()
            integration.install(current)
            agent = block()
            integration.uninstall()
            samples["no agent"] += plain
            samples["agent, step timing only"] += agent
            paired.append(statistics.median(agent) - statistics.median(plain))
        steps_recorded = current.steps.completed
        direct = _bookkeeping_cost(current)
        current.finalize("bench")
    medians = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{args.rounds} alternating blocks of {args.block} steps in one process ({steps_recorded} steps recorded), median step time:")
    for name, value in medians.items():
        print(f"  {name:26s} {value * 1000:8.3f} ms")
    print(f"the agent's own bookkeeping per step (data wait, markers, close, raw write), timed alone: {direct * 1e6:.1f} us")
    extra = statistics.median(paired)
    print(f"ratio: {1 + extra / medians['no agent']:.4f} (target <= 1.005); cost per step, median of the {args.rounds} paired "
          f"rounds: {extra * 1e6:+.1f} us (quartiles {statistics.quantiles(paired)[0] * 1e6:+.0f} / {statistics.quantiles(paired)[2] * 1e6:+.0f} us; "
          f"on a 100 ms step that is {extra / 0.1:+.3%})")


if __name__ == "__main__":
    main()
