"""Causal language-model pretraining: ``python -m experiments.lm``, the ``lm`` stage of dvc.yaml.

``sources`` reads the text in parts, ``prepare`` tokenises it once into ``shards``
(with ``tokenizer``), the ``lm-tokenizer`` and ``lm-shard`` stages; ``data`` serves
the memory-mapped rows (preparing a raw source on the fly); ``sampler``
orders the training batches by global step and ``datamodule`` hands them to
Lightning; ``gpt`` is the network, ``goldfish`` the optional loss and ``module``
the Lightning module that trains them; ``cli`` is the command line that runs
them through :mod:`experiments.common.run`.
"""
