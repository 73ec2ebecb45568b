"""Prints what the hook left in the interpreter, for the off-path tests."""
import sys
import threading

print("agent" if "msprof_agent.session" in sys.modules else "no-agent",
      "wrapt" if "wrapt" in sys.modules else "no-wrapt",
      "json" if "json" in sys.modules else "no-json",
      f"threads={threading.active_count()}")
