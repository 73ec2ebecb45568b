"""The causes the advisor's scenario scripts inject: named functions, so that the hot-spot table can
name them, and the flags that size them."""
import argparse
import time


def parser(description):
    """The flags both frameworks' scenario scripts take."""
    parse = argparse.ArgumentParser(description=description)
    parse.add_argument("--steps", type=int, default=16)
    parse.add_argument("--data-ms", type=float, default=0.0, help="the data source sleeps this long per batch")
    parse.add_argument("--loop-ms", type=float, default=0.0, help="Python work in the training loop, per step")
    parse.add_argument("--pause-every", type=int, default=0)
    parse.add_argument("--pause-ms", type=float, default=0.0)
    return parse


def slow_data_source(ms):
    time.sleep(ms / 1000)


def costly_sample(ms):
    """CPU work, not a wait: spins until this thread has used ``ms`` of CPU (longer on a busy machine)."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def host_work_in_loop(ms):
    time.sleep(ms / 1000)


def python_in_forward(ms):
    time.sleep(ms / 1000)


def periodic_pause(ms):
    time.sleep(ms / 1000)


def after_step(args, step):
    """The loop's injected host work and periodic pause, after step ``step``'s compute."""
    if args.loop_ms:
        host_work_in_loop(args.loop_ms)
    if args.pause_every and step % args.pause_every == 0:
        periodic_pause(args.pause_ms)
