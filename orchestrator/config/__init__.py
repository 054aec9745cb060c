"""Configuration: cluster profiles, the project's params.yaml, which profile is active, CPU binding, topology.

The facts a plan is made from, read once at the boundary into frozen
dataclasses. Imports :mod:`orchestrator.util` and :mod:`orchestrator.slurm`
(time limits, ClusterName), never pipelines, scripts or jobs.
"""
