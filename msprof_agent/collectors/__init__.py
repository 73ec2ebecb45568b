"""Host-side collectors the agent runs itself: step boundaries, CPU and memory samples."""
