"""``python -m msprof_agent.background_analysis PROFILER_DIR RANK [--quiet]``: one window analysed in its own process.

The session starts it for windows analysed asynchronously, niced, so the training keeps its CPU
time and the GIL. It lives outside ``analysis/`` so that ``-m`` imports nothing heavy before the
nice (the analysis package pulls in numpy). The analysis table goes to stderr, or with ``--quiet``
(capture-policy windows, which may be many) one line.
"""
import argparse
import os

from . import log


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m msprof_agent.background_analysis", description="Analyse one rank of a window in its own process.")
    parser.add_argument("profiler_dir")
    parser.add_argument("rank", type=int)
    parser.add_argument("--quiet", action="store_true", help="one line instead of the table")
    args = parser.parse_args(argv)
    os.nice(5)
    from .pipeline import analyse_rank

    summary = analyse_rank(args.profiler_dir, args.rank, announce=not args.quiet)
    if args.quiet:
        log.say(f"analysed steps {summary['step_range']} -> {summary['profiler_dir']}")


if __name__ == "__main__":
    main()
