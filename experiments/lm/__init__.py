"""Causal language-model pretraining: ``python -m experiments.lm``, the ``lm`` stage of dvc.yaml.

``data`` reads, splits, tokenises (``tokenizer``) and packs the text; ``sampler``
orders the training batches by global step and ``datamodule`` hands them to
Lightning; ``gpt`` is the network, ``goldfish`` the optional loss and ``module``
the Lightning module that trains them; ``cli`` is the command line that runs
them through :mod:`experiments.common.run`.
"""
