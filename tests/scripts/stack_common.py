"""What the third-party stack scenarios (``stack_*.py``) share: the arguments each takes, and a synthetic
Dataset whose ``__getitem__`` can be made slow (the slow-data cause)."""
import argparse
import time

import torch


def arguments(doc, steps):
    """The parser each scenario starts from: --steps, --workers (its DataLoader's) and --sample-ms."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--sample-ms", type=float, default=0.0, help="__getitem__ sleeps this long per sample")
    return parser


class Samples(torch.utils.data.Dataset):
    """FIELDS: tensors of one row a sample, a dict of them (a sample is then a dict) or a tuple; each
    ``__getitem__`` sleeps SAMPLE_MS first."""

    def __init__(self, fields, sample_ms):
        self.fields, self.sample_ms = fields, sample_ms

    def __len__(self):
        return len(next(iter(self.fields.values())) if isinstance(self.fields, dict) else self.fields[0])

    def __getitem__(self, index):
        if self.sample_ms:
            time.sleep(self.sample_ms / 1000)
        if isinstance(self.fields, dict):
            return {name: field[index] for name, field in self.fields.items()}
        return tuple(field[index] for field in self.fields)
