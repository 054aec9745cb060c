"""Jobs: backends, the ledger, attach-or-submit and waiting, detached submission, status, faults, provenance.

The side-effecting layer over the core: every command it runs goes through a
Runner. Imports the core and :mod:`orchestrator.analysis` (MFU in status);
never containers, testbed or the CLI.
"""
