"""Job scripts: quoting, planning (spec + profile -> exact job), rendering with Jinja, lint, the matrix.

The pure core: planning and rendering touch no process, clock or environment
(the workspace and lint run things through a Runner). Imports util, slurm,
config and pipeline; never jobs, containers, analysis, testbed or the CLI.
"""
