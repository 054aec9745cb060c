"""``python -m experiments.classify``: the benchmark stage's command (see :mod:`experiments.classify.cli`)."""

from experiments.classify.cli import main

if __name__ == "__main__":
    main()
