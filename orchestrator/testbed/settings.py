"""What the testbed is: its cluster, partition, nodes and their size, account and users.

One frozen :class:`LocalSlurmSettings` decides every name the config files, the daemon steps
and ``status`` use; nothing else in the testbed fixes a node's name.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalSlurmSettings:
    """What the testbed is; the defaults match orchestrator/config/profiles/testbed.yaml."""

    hostname: str = "localhost"  # this host's short name: slurmctld refuses to start under any other
    cluster_name: str = "testbed"
    partition: str = "debug"
    nodes: tuple[str, ...] = ("node1", "node2")
    max_time: str = "01:00:00"
    exclusive: bool = True  # the profile's whole_node: jobs get whole nodes, so CPU masks are theirs
    cores: int = 8
    gpus: int = 4
    memory_mb: int = 4000
    first_port: int = 17001  # one slurmd port per node, all on this host
    account: str = "project_465000858"
    users: tuple[str, ...] = ("root",)
    db_name: str = "slurm_acct_db"
    db_user: str = "slurm"
    # A throwaway database that only listens on this host; the file holding it is mode 600.
    db_password: str = "testbed-slurmdbd"

    @classmethod
    def for_this_machine(cls) -> LocalSlurmSettings:
        """LocalSlurmSettings with this host's name, and the user behind sudo (if any) as a second user."""
        users = ["root"]
        sudo_user = os.environ.get("SUDO_USER")
        if sudo_user and sudo_user != "root":
            users.append(sudo_user)
        return cls(hostname=socket.gethostname().split(".")[0], users=tuple(users))

    @property
    def components(self) -> tuple[str, ...]:
        """What ``status`` reports on, in its order: the services, one row per node, the account."""
        return ("munge", "mariadb", "slurmdbd", "slurmctld", *self.nodes, "account")

    def port(self, node: str) -> int:
        return self.first_port + self.nodes.index(node)

    def gpu_devices(self, node: str) -> tuple[str, ...]:
        """Device files of ``node``'s fake GPUs: a different set per node, as on a real cluster."""
        first = self.nodes.index(node) * self.gpus
        return tuple(f"/dev/fakegpu{i}" for i in range(first, first + self.gpus))
