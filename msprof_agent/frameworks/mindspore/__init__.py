"""MindSpore integration: the run-loop patches (``patch``) and MindSpore's own profiler as the device session (``device``)."""
