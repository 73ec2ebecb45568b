"""A job without a framework: says how many steps it "trained" and leaves with --exit-code, so the
option checks the hook makes at start-up are tested in the fast set (tiny_torch.py shows a real
training unharmed by them)."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()
print(f"trained {args.steps} steps")
raise SystemExit(args.exit_code)
