"""The DVC pipeline as the orchestrator sees it: resolved stages, ``orchestrator run`` arguments, fingerprints.

DVC resolves dvc.yaml; this package only reads the result. Imports util, slurm
and config; never scripts, jobs or anything above.
"""
