"""The device's peak FLOPS, the denominator of MFU (model FLOPs utilization).

Accelerators: a table of dense FP16/BF16 tensor peaks from the vendors' data sheets, matched on the
device name the framework reports. CPU: no table fits every machine, so a short calibration (a
float32 matrix multiply through numpy's BLAS on every core) is measured once per machine and
cached in ``~/.cache/msprof-agent/cpu_peak.json``; it is an achievable peak, said as such.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import time

from ..contract.names import CPU_PEAK_CACHE
from ..writers import write_bytes

# Dense TF32 and FP32 peaks, TFLOPS, where the data sheet gives them (else the FP16/BF16 one is used, and said).
OTHER_PEAK_TFLOPS = {"H200": {"tf32": 494.5, "float32": 66.9}, "H100 PCIe": {"tf32": 378.0, "float32": 51.2},
                     "H100": {"tf32": 494.5, "float32": 66.9}, "A100": {"tf32": 156.0, "float32": 19.5}, "A800": {"tf32": 156.0, "float32": 19.5},
                     "L40S": {"tf32": 183.0, "float32": 91.6}, "L4": {"tf32": 60.0, "float32": 30.3}}
HALF = ("bfloat16", "float16")
# Dense FP16/BF16 peak, TFLOPS.
ACCELERATOR_PEAK_TFLOPS = (
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0),
    ("L4", 121.0), ("A10", 125.0), ("V100", 125.0), ("T4", 65.0), ("RTX 4090", 165.0), ("RTX 3090", 71.0),
    ("Ascend910B", 313.0), ("Ascend910", 256.0),
)
MATRIX = 1024


def peak_gflops(device_target: str, device_name: str | None = None, dtype: str | None = None) -> tuple[float | None, str]:
    """(peak GFLOPS, how it was obtained), or (None, why not); DTYPE: the matmuls' ("bfloat16", "float16", "tf32",
    "float32"; None: FP16/BF16, the usual training precision on an accelerator)."""
    if device_target in ("GPU", "Ascend"):
        for key, tflops in ACCELERATOR_PEAK_TFLOPS:
            if device_name and key.lower() in device_name.lower():
                other = OTHER_PEAK_TFLOPS.get(key, {}).get(dtype or "")
                if dtype and dtype not in HALF and other:
                    return other * 1000.0, f"table: {key}, {other:g} TFLOPS dense {dtype.upper()} (the matmuls ran in {dtype})"
                ran = f" (the matmuls ran in {dtype}; no {dtype} peak is known for it)" if dtype and dtype not in HALF else ""
                return tflops * 1000.0, f"table: {key}, {tflops:g} TFLOPS dense FP16/BF16{ran}"
        return None, f"no peak known for {device_name or device_target}"
    return _cpu_peak()


def _machine_key() -> str:
    return f"{platform.node()}|{platform.processor() or platform.machine()}|{os.cpu_count()}"


def _cpu_peak() -> tuple[float, str]:
    try:
        with open(CPU_PEAK_CACHE) as handle:
            cached = json.load(handle)
        if cached.get("machine") == _machine_key():
            return cached["gflops"], cached["how"]
    except (OSError, ValueError, KeyError):
        pass
    import numpy as np

    a = np.random.default_rng(0).standard_normal((MATRIX, MATRIX), dtype=np.float32)
    a @ a  # warm the BLAS threads
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - began)
    gflops = 2.0 * MATRIX ** 3 / best / 1e9
    how = f"calibrated: float32 {MATRIX}x{MATRIX} matmul via numpy on {os.cpu_count()} cores, best of 5"
    with contextlib.suppress(OSError):
        write_bytes(CPU_PEAK_CACHE, json.dumps({"machine": _machine_key(), "gflops": gflops, "how": how}).encode())
    return gflops, how
