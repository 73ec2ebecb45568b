"""PyTorch integration: the run-loop patches (``patch``) and torch.profiler as the device session (``device``)."""
