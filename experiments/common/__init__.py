"""What both experiments share: the run skeleton and the parts it is made of.

``run`` is the skeleton (requeue signal, resume, final weights, metrics, teardown);
``requeue`` the checkpoint-and-requeue protocol; ``callbacks`` (ranks, step times,
per-step logging), ``datawait`` (with ``timedloader``'s timed batches), ``power`` and ``profiling`` measure a run;
``peak`` gives the FLOP/s and memory peaks behind MFU; ``speed`` compiles the model,
picks the optimizer's fastest form and sets up FP8; ``metrics`` writes metrics.json and
``plots`` the per-step curves; ``args`` holds the shared argument types.
"""
