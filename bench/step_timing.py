"""Cost of always-on step timing (no op collection), side by side with no agent, in one process.

The PyTorch integration is installed (step boundaries, data waits, forward/backward markers, step
records into the raw store; the op window never opens) and uninstalled between blocks of steps
run in turn (see torch_blocks.py). Two measurements:

1. tiny steps (a 8x8 MLP, ~0.4 ms): the hooks' cost dominates, so its absolute value per step is
   measured precisely (median difference, bootstrap 95 % interval);
2. the ResNet-style CNN of bench/overhead_torch.py (~50 ms steps): the ratio itself, target <= 1.005.

The cost per step does not grow with the model (the hooks fire once per step; modules run on
torch's hook-free path), so (1) also gives the ratio for any step length. ``--against CHECKOUT``
adds another checkout's step timing as a third mode of the same rounds (tiny steps), for a
before/after at the same load: ``git worktree add /tmp/base COMMIT`` then
``python bench/step_timing.py --against /tmp/base``.

Where the cost goes, counted without the load's noise: ``--bytecodes`` traces the opcodes
(``sys.settrace``) of 20 tiny-MLP steps without and with the agent and prints the difference per step,
function by function. On 2026-12-03: torch's own ~3 000 a step, the agent's ~576: the root module sent
down ``nn.Module._call_impl``'s slow path by the global forward pre-hook ~97, the step's close (optimizer
post-hook, ``_step_ends``, the recorder's close, the session's) ~155, the next step's open and its window
check ~69, the forward start (pre-hook, mark, disarm and re-arm) ~80, the data wait ~79, the store's JSON
line and flush ~50 (a flush every few steps), the backward end ~34, the optimizer wrappers ~32.

``--parts`` times the hooks themselves: the same hook points with no work in them (``hooks_alone``),
all together and each alone, in the same rounds as no agent and the agent. On 2026-12-03 (a faster
2-core runner, 60 rounds: the agent +19.1 us a step): **the hooks alone +9.2 us**, of which the forward
start 5.4 (torch's hook path for the root module, taken once a step: ~1.2 us when timed hot on its own,
~4.7 us inside a training step), the backward 1.9, the fetch 1.4, the step wrapper 0.6, the close 0.3;
the agent's work in them ~10 us. A <= 10 us goal leaves ~1 us for that work: the forward start would have
to be marked without a module hook (we found no cheaper signal in torch 2.13 on Python 3.11) as well as the
recorder, the session and the window registry folded into one flat function per hook.
(Marking the forward start from the root module's own call, through torch's private
``_compiled_call_impl`` on its class, saves the slow path, but puts a method on the user's model class
that torch.compile would trace: not done.)
"""
import argparse
import collections
import importlib.util
import itertools
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.torch_blocks import interleave, median_difference, median_ratio, resnet_training, train_steps  # noqa: E402


def tiny_training(batches):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    data = torch.utils.data.TensorDataset(torch.randn(batches * 4, 8), torch.randn(batches * 4, 8))
    return model, optimizer, torch.utils.data.DataLoader(data, batch_size=4)


def opcodes_per_step(model, optimizer, loader, steps=20):
    """Opcode events per training step, by (file, function): sys.settrace's count, the same at any load."""
    counts = collections.Counter()

    def tracer(frame, event, _arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[frame.f_code.co_filename, frame.f_code.co_name] += 1
        return tracer

    batches = iter(loader)
    next(batches)  # the loader's start and first fetch left out
    sys.settrace(tracer)
    for x, y in itertools.islice(batches, steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    sys.settrace(None)
    return {key: n / steps for key, n in counts.items()}


def print_bytecodes(current, integration):
    """The agent's opcodes per step, function by function (``--bytecodes``)."""
    model, optimizer, loader = tiny_training(100)
    opcodes_per_step(model, optimizer, loader, 5)  # warm: lazy imports, first-call caches
    plain = opcodes_per_step(model, optimizer, loader)
    integration.install(current)
    optimizer._patch_step_function()
    opcodes_per_step(model, optimizer, loader, 5)
    agent = opcodes_per_step(model, optimizer, loader)
    integration.uninstall()
    print(f"opcodes per tiny step: no agent {sum(plain.values()):.0f}, agent {sum(agent.values()):.0f}, "
          f"the agent's {sum(agent.values()) - sum(plain.values()):+.0f}")
    extra = {key: agent.get(key, 0) - plain.get(key, 0) for key in set(plain) | set(agent)}
    for (filename, function), n in sorted(extra.items(), key=lambda item: -abs(item[1])):
        if abs(n) >= 3:
            print(f"  {n:+7.1f}  {os.path.relpath(filename)}:{function}")


def hooks_alone(optimizer, parts):
    """(enter, leave) installing the agent's hook points with no work in them, for ``parts`` of
    "forward" (a global forward pre-hook that takes itself out at its first call, put back by an
    optimizer step post-hook, as the agent's is), "close" (the post-hook alone), "fetch" (the loader
    iterator's ``__next__`` with two clock readings), "backward" (``torch.autograd.backward`` with one)
    and "step" (the optimizer class's ``step`` called through): what the hooks cost before they do anything."""
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optimizer_mod
    import torch.utils.data.dataloader as dataloader_mod

    iterator, kind = dataloader_mod._BaseDataLoaderIter, type(optimizer)
    fetch, backward, step = vars(iterator)["__next__"], torch.autograd.backward, vars(kind)["step"]
    handles = []

    def forward_started(_module, _args):
        hooks.pop(forward.id, None)

    def step_closed(_optimizer, _args, _kwargs):
        if "forward" in parts:
            hooks[forward.id] = forward_started

    def timed(*args, **kwargs):
        time.time_ns()
        result = fetch(*args, **kwargs)
        time.time_ns()
        return result

    def marked(*args, **kwargs):
        result = backward(*args, **kwargs)
        time.time_ns()
        return result

    def stepped(*args, **kwargs):
        return step(*args, **kwargs)

    forward = module_mod.register_module_forward_pre_hook(forward_started)
    hooks = forward.hooks_dict_ref()
    forward.remove()

    def enter():
        if parts & {"forward", "close"}:
            handles.append(optimizer_mod.register_optimizer_step_post_hook(step_closed))
        if "forward" in parts:
            hooks[forward.id] = forward_started
        for part, owner, name, replacement in (("fetch", iterator, "__next__", timed), ("backward", torch.autograd, "backward", marked),
                                               ("step", kind, "step", stepped)):
            if part in parts:
                setattr(owner, name, replacement)

    def leave():
        while handles:
            handles.pop().remove()
        hooks.pop(forward.id, None)
        iterator.__next__, torch.autograd.backward, kind.step = fetch, backward, step
    return enter, leave


def print_parts(modes, model, optimizer, loader, rounds):
    """``--parts``: the hooks alone, all of them and each on its own, against no agent in the same rounds."""
    every = {"forward", "close", "fetch", "backward", "step"}
    modes = dict(modes, **{"hooks alone": hooks_alone(optimizer, every)},
                 **{f"hook alone: {part}": hooks_alone(optimizer, {part}) for part in sorted(every)})
    tiny, _ = interleave(modes, lambda: train_steps(model, optimizer, loader, torch.nn.functional.mse_loss), rounds)
    for name in modes:
        if name != "no agent":
            cost, low, high = median_difference(tiny["no agent"], tiny[name])
            print(f"  {name:22s} {cost * 1e6:+6.1f} us per step (95 % {low * 1e6:+.1f} .. {high * 1e6:+.1f})")


def other_checkout(checkout, settings):
    """Another checkout's session (from SETTINGS) and torch integration: its agent imported as
    ``msprof_agent_base`` (the package's imports are relative), so both run in this process in turn."""
    root = os.path.join(os.path.abspath(checkout), "msprof_agent")
    spec = importlib.util.spec_from_file_location("msprof_agent_base", os.path.join(root, "__init__.py"), submodule_search_locations=[root])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    options = importlib.import_module("msprof_agent_base.options")
    started = importlib.import_module("msprof_agent_base.session").start(options.from_mapping(settings), origin="bench")
    return started, importlib.import_module("msprof_agent_base.frameworks.torch.patch")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny-rounds", type=int, default=30)
    parser.add_argument("--resnet-rounds", type=int, default=8)
    parser.add_argument("--against", metavar="CHECKOUT", help="also another checkout's step timing, in turn with this one's (tiny steps only)")
    parser.add_argument("--bytecodes", action="store_true", help="count the agent's opcodes per step, function by function, and stop")
    parser.add_argument("--parts", action="store_true", help="time the agent's hooks with no work in them, all and each alone, and stop")
    args = parser.parse_args()

    from msprof_agent import options, session
    from msprof_agent.frameworks.torch import patch as integration

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out_dir:
        settings = {"start": True, "output_path": out_dir, "start_step": 10 ** 9}  # recording never starts: step timing alone
        current = session.start(options.from_mapping(settings), origin="bench")
        if args.bytecodes:
            print_bytecodes(current, integration)
            current.finalize("bench")
            return
        # installed as in a job, before the optimizer was made: torch patches each optimizer class's step as
        # its first instance is made, and the integration wraps that step too (the hand-over check)
        modes = {"no agent": (lambda: None, lambda: None),
                 "step timing": (lambda: (integration.install(current), optimizer._patch_step_function()), integration.uninstall)}

        model, optimizer, loader = tiny_training(100)
        if args.parts:
            print(f"tiny steps, {args.tiny_rounds} rounds, against no agent:")
            print_parts(modes, model, optimizer, loader, args.tiny_rounds)
            current.finalize("bench")
            return
        if args.against:
            base_session, base_integration = other_checkout(args.against, settings)
            modes[args.against] = (lambda: (base_integration.install(base_session), optimizer._patch_step_function()), base_integration.uninstall)
        tiny, _ = interleave(modes, lambda: train_steps(model, optimizer, loader, torch.nn.functional.mse_loss), args.tiny_rounds)
        cost, low, high = median_difference(tiny["no agent"], tiny["step timing"])
        plain_tiny = statistics.median(tiny["no agent"])
        print(f"tiny steps ({args.tiny_rounds} rounds x 99 steps per mode): no agent {plain_tiny * 1e6:.0f} us per step; "
              f"step timing costs {cost * 1e6:+.1f} us per step (95 % {low * 1e6:+.1f} .. {high * 1e6:+.1f})")
        if args.against:
            other, low_o, high_o = median_difference(tiny["no agent"], tiny[args.against])
            change, low_c, high_c = median_difference(tiny[args.against], tiny["step timing"])
            print(f"{args.against}'s step timing costs {other * 1e6:+.1f} us per step (95 % {low_o * 1e6:+.1f} .. {high_o * 1e6:+.1f}); "
                  f"this checkout's minus it: {change * 1e6:+.1f} us (95 % {low_c * 1e6:+.1f} .. {high_c * 1e6:+.1f})")
            base_session.finalize("bench")
            del modes[args.against]

        model, optimizer, loader = resnet_training(11)
        resnet, _ = interleave(modes, lambda: train_steps(model, optimizer, loader), args.resnet_rounds)
        ratio, low_r, high_r = median_ratio(resnet["no agent"], resnet["step timing"])
        plain = statistics.median(resnet["no agent"])
        print(f"ResNet-style CNN ({args.resnet_rounds} rounds x 10 steps per mode): no agent {plain * 1e3:.1f} ms per step; "
              f"ratio {ratio:.4f} (95 % {low_r:.4f} .. {high_r:.4f}; target <= 1.005)")
        print(f"the tiny-step cost on this step: {1 + cost / plain:.4f} (95 % {1 + low / plain:.4f} .. {1 + high / plain:.4f}); "
              f"0.5 % holds for steps from {max(cost, 0) / 0.005 * 1e3:.1f} ms")
        print(f"steps recorded: {current.steps.completed}")
        current.finalize("bench")


if __name__ == "__main__":
    main()
