"""The text-classification benchmark: ``python -m experiments.classify``, the ``benchmark`` stage of dvc.yaml.

``data`` builds byte-tokenised datasets by name, ``models`` builds encoder networks
by name, ``module`` is the Lightning module that trains one, and ``cli`` is the
command line that runs them through :mod:`experiments.common.run`.
"""
