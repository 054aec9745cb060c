"""What the testbed's checks read from command output: installed packages, node states, associations.

Pure functions of the text ``dpkg-query``, ``sinfo`` and ``sacctmgr`` print. The
testbed does not use :mod:`orchestrator.slurm`'s parsers: it must not depend on what it tests.
"""

from __future__ import annotations


def parse_installed(dpkg_output: str) -> set[str]:
    """Packages that ``dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n'`` lists as installed."""
    installed = set()
    for line in dpkg_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith("ii"):
            installed.add(fields[0].split(":")[0])
    return installed


def parse_node_states(sinfo_output: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %T'`` -> node -> state (e.g. idle, mixed, down*, drained)."""
    states = {}
    for line in sinfo_output.splitlines():
        fields = line.split()
        if len(fields) == 2:
            states[fields[0]] = fields[1].lower()
    return states


def node_is_up(state: str | None) -> bool:
    """Responding (no trailing ``*``) and able to run jobs."""
    return state is not None and state.split("+")[0] in {"idle", "mixed", "allocated", "completing"}


def parse_associations(sacctmgr_output: str) -> set[tuple[str, str, str]]:
    """``sacctmgr -n -P show assoc format=cluster,account,user`` -> {(cluster, account, user)}."""
    rows = (line.split("|") for line in sacctmgr_output.splitlines() if line.count("|") >= 2)
    return {(cluster, account, user) for cluster, account, user, *_ in rows}
