"""A GPT-style PyTorch training on one CUDA device, the workload of ``bench/gpu.py`` (run it there, not alone).

Its own clock is the truth the bench compares against: a CUDA event recorded at each step's end (no sync),
read after the loop, so ``gpu_step_ms`` is the device's time between two step ends. ``--native`` wraps the
steps in a bare ``torch.profiler.profile`` (CPU + CUDA, shapes, FLOPs), the comparator the agent must match.

Shapes: ``gpt`` is 118.6 M parameters (d 1024, 8 layers, 16 heads, seq 1024, batch 8, vocab 8192), bf16
autocast, SDPA attention, fused AdamW, pinned batches copied non-blocking, ``loss.item()`` every 10th step;
``tiny`` the same code at d 64, 12 layers, seq 64, batch 4 with ``loss.item()`` every step (launch-bound).
The FLOPs of a ``gpt`` step from its matmuls: ``matmul_flops()``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # d, layers, heads, seq, batch, vocab, sync every
    "gpt": (1024, 8, 16, 1024, 8, 8192, 10),
    "tiny": (64, 12, 4, 64, 4, 8192, 1),
}


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int, seq: int, vocab: int, sleep_ms: float) -> None:
        self.count, self.seq, self.vocab, self.sleep = count, seq, vocab, sleep_ms / 1000

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=torch.Generator().manual_seed(i))


def matmul_flops(model: str) -> dict[str, float]:
    """Forward + backward FLOPs of one step from the matmuls (3x the forward's 2*m*n*k): the linear layers,
    and attention's two matmuls with the causal half and with the full square."""
    d, layers, _heads, seq, batch, vocab, _ = SHAPES[model]
    tokens = batch * seq
    weights = layers * (3 * d * d + d * d + 8 * d * d) + d * vocab
    linear = 6.0 * weights * tokens
    attention_full = 3 * 2 * 2.0 * layers * batch * seq * seq * d
    return {"linear": linear, "causal": linear + attention_full / 2, "full": linear + attention_full}


class _StepEnd:
    """A step's end on the device's clock (a CUDA event, no sync), or the host's where there is no GPU."""

    def __init__(self, cuda: bool) -> None:
        self.event = torch.cuda.Event(enable_timing=True) if cuda else None
        self.at = 0.0

    def record(self) -> None:
        if self.event is not None:
            self.event.record()
        else:
            self.at = time.perf_counter()

    def elapsed_time(self, later: _StepEnd) -> float:
        if self.event is not None and later.event is not None:
            return float(self.event.elapsed_time(later.event))
        return (later.at - self.at) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(SHAPES), default="gpt")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--data-sleep-ms", type=float, default=0.0, help="each batch's wait in the dataset")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--native", default="", help="wrap the steps in torch.profiler; write its chrome trace here (or 'none')")
    parser.add_argument("--result", default="", help="write the job's own figures (JSON) here")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the bench where no GPU is (host clock, no CUDA figures)")
    args = parser.parse_args()
    d, layers, heads, seq, batch, vocab, sync_every = SHAPES[args.model]
    torch.manual_seed(0)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model = GPT(d, layers, heads, seq, vocab).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loader = torch.utils.data.DataLoader(Tokens(batch * args.steps, seq, vocab, args.data_sleep_ms / batch),
                                         batch_size=batch, pin_memory=True, num_workers=0)
    step_fn = torch.compile(model) if args.compile else model
    ends = [_StepEnd(cuda) for _ in range(args.steps)]
    native = None
    if args.native:
        from torch.profiler import ProfilerActivity, profile

        native = profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda, record_shapes=True, with_flops=True)
        native.start()
    began = time.perf_counter()
    for step, tokens in enumerate(loader):
        tokens = tokens.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = step_fn(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % sync_every == 0:
            loss.item()
        ends[step].record()
    if cuda:
        torch.cuda.synchronize()
    loop_s = time.perf_counter() - began
    if native is not None:
        native.stop()
        if args.native != "none":
            native.export_chrome_trace(args.native)
    gpu_ms = [ends[i - 1].elapsed_time(ends[i]) for i in range(1, args.steps)]
    steady = sorted(gpu_ms[10:]) or sorted(gpu_ms)
    result = {"model": args.model, "parameters": parameters, "steps": args.steps, "loop_s": round(loop_s, 4),
              "gpu_step_ms": gpu_ms, "gpu_step_ms_median": steady[len(steady) // 2],
              "max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
              "max_memory_reserved": torch.cuda.max_memory_reserved() if cuda else None,
              "matmul_flops": matmul_flops(args.model), "loss": float(loss.detach()), "pid": os.getpid()}
    print(f"job: {args.model} {parameters / 1e6:.1f} M parameters, median step {result['gpu_step_ms_median']:.2f} ms (CUDA events), "
          f"peak allocated {(result['max_memory_allocated'] or 0) / 2**30:.3f} GiB, loss {result['loss']:.4f}", flush=True)
    if args.result:
        with open(args.result, "w") as handle:
            json.dump(result, handle)
    assert math.isfinite(result["loss"])


if __name__ == "__main__":
    main()
