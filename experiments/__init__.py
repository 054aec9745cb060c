"""Training code run inside the cluster jobs (torch and Lightning; never imported by the orchestrator).

One subpackage per experiment, each run as ``python -m experiments.<name>`` (its
``__main__``; the command line itself is its ``cli``), and one for what they share:

- ``classify``: the text-classification benchmark (the ``benchmark`` stage of dvc.yaml);
- ``lm``: GPT-style causal language-model pretraining, optionally with the goldfish loss (the ``lm`` stage);
- ``common``: the run skeleton both follow (``run``: requeue, resume, metrics, teardown) and its parts.
"""
