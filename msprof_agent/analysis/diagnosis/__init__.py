"""The diagnosis: what bounds a rank's steps, each cause a finding with its time at stake, its evidence and what to change.

- ``breakdown``: each step split into stages (data wait, compute, runtime, host, pause) and their figures;
- ``findings``: what a finding is, the thresholds, ``make_finding`` (every rule's, the GPU's and the cluster's);
  ``actions``: what to change, in the framework's words; ``words``: figures in words;
- the rules: ``data_wait``, ``stage_rules`` (host, runtime, hot ops, communication, utilisation), ``patterns``
  (warm-up, periodic jitter), ``memory_growth``, ``gpu_rules`` (a GPU's,
  from the device room's figures: GPU-bound, launch-bound, syncs, pageable copies, GPU memory growth);
- ``hot_spots``: the Python hot spots;
- ``advice.advise``: the entry point, the findings ranked (``verdict``: the rule, its basis, a memory growth's
  consequence) and the verdict.
"""
