"""``python -m experiments.lm``: the lm stage's command (see :mod:`experiments.lm.cli`)."""

from experiments.lm.cli import main

if __name__ == "__main__":
    main()
