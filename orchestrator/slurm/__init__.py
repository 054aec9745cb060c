"""Slurm: the argv of its commands, parsers for what they print, job states, time limits, cluster config.

Pure apart from :mod:`.config`'s one ``scontrol show config`` call, which goes
through a Runner. Imports only :mod:`orchestrator.util` and errors; it knows
nothing of profiles, pipelines or jobs.
"""
