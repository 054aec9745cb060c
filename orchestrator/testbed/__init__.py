"""The project's own Slurm testbed: a real two-node cluster with accounting on this machine.

Imports only util and errors: the testbed must not depend on what it tests.
"""
