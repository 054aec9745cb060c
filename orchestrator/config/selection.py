"""The active cluster profile: which one, and adjusted to the machine it describes.

The one place that looks at the environment to choose a profile (the plan
itself never does): ``--cluster``, else params.yaml's ``orchestrator.cluster``
(unless ``auto``), else the built-in profile whose ``cluster_name`` is this
Slurm's ClusterName, else ``local``.
"""

from __future__ import annotations

import dataclasses

from orchestrator.config import machine, params, profile
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.slurm import config as slurm_config
from orchestrator.util.runner import Runner, SubprocessRunner


def select_cluster(cli_value: str | None, prm: params.Params, runner: Runner) -> str:
    """--cluster, else params.yaml's orchestrator.cluster (unless "auto"), else the
    profile whose cluster_name is this Slurm's ClusterName, else local."""
    chosen = cli_value or prm.settings.cluster
    if chosen and chosen != "auto":
        return chosen
    detected = detect_cluster(runner)
    return detected or params.DEFAULT_CLUSTER


def detect_cluster(runner: Runner) -> str | None:
    config, _ = slurm_config.read(runner, timeout=15)  # no answer: not on a working Slurm
    name = config.get("ClusterName") if config else None
    if not name:
        return None
    for builtin in profile.builtin_names():
        if profile.load(builtin).profile.scheduler.cluster_name == name:
            return builtin
    return None


def machine_profile(loaded: LoadedProfile, runner: Runner | None = None) -> LoadedProfile:
    """A profile without a scheduler describes this machine: the cores this process may
    use and the GPUs here, not the file's figures. Which items run on those GPUs is
    the plan's choice (scripts.devices)."""
    p = loaded.profile
    if p.uses_slurm:
        return loaded
    found = machine.detect(runner or SubprocessRunner())
    node = dataclasses.replace(p.node, cores=found.cores or p.node.cores)
    return dataclasses.replace(loaded, profile=dataclasses.replace(p, node=node), machine=found)


def load_profile(name: str, runner: Runner | None = None) -> LoadedProfile:
    return machine_profile(profile.load(name), runner)
