"""What CUDA's names mean, for every reader of a CUDA profile (the torch device session, the analysis): which
host events are the runtime's or driver's calls, which of those queue device work and which wait for it, and
which device activities are copies or fills rather than kernels. Names only: nothing here imports torch."""
from __future__ import annotations

# Calls that make the host wait for the device: the queue drains, and the device idles until the host launches again.
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
              "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD")
# Calls that queue device work (a kernel, a copy, a fill).
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
                "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemset", "cuMemcpyAsync", "cuMemsetD8Async", "cuMemsetD32Async",
                "cudaGraphLaunch", "cuGraphLaunch")
MEMCPY_PREFIX = "Memcpy"  # kineto's names of device copies: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"...
MEMSET_PREFIX = "Memset"
PAGEABLE = "Pageable"  # a copy from or to pageable host memory: synchronous for the host, whatever non_blocking asked


def is_runtime_call(name: str) -> bool:
    """A CUDA runtime (``cuda...``) or driver (``cuXxx``) API call, not an op of the model."""
    return name.startswith("cuda") or (name.startswith("cu") and name[2:3].isupper())


def is_sync_call(name: str) -> bool:
    return name in SYNC_CALLS


def is_launch_call(name: str) -> bool:
    return name in LAUNCH_CALLS


def activity_kind(name: str) -> str:
    """A device activity's kind: "memcpy", "memset" or "kernel"."""
    if name.startswith(MEMCPY_PREFIX):
        return "memcpy"
    if name.startswith(MEMSET_PREFIX):
        return "memset"
    return "kernel"
