"""Analysis of finished runs: MFU, energy and emissions, parallel layouts, operator diffs, the scaling report.

Reads metrics and provenance files; submits nothing. Imports the core (util,
slurm, config, pipeline, scripts); never jobs, containers, testbed or the CLI.
"""
