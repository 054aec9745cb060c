"""Slurm + Apptainer experiment orchestration for DVC pipelines.

The login-node side of this package stays light: nothing imported from here pulls
in torch or lightning (see benchmarks/startup.py).
"""

__version__ = "0.1.0"
