"""`orchestrator testbed`: bring the project's Slurm testbed up or down, or say how it stands.

The steps live in :mod:`orchestrator.testbed.cluster`; this module only turns the
commands into calls of :class:`~orchestrator.testbed.cluster.Testbed` and prints
their progress (to stderr) and outcome.
"""

from __future__ import annotations

import time

import click

from orchestrator.cli.options import FiniteFloat, WholeGroup
from orchestrator.testbed.cluster import Testbed
from orchestrator.testbed.settings import LocalSlurmSettings


def _say(message: str) -> None:
    click.echo(f"testbed: {message}", err=True)


@click.group(cls=WholeGroup)
def testbed() -> None:
    """A real two-node Slurm cluster on this machine (profile `testbed`), for tests.

    Needs root and Debian's apt-get. Daemons log to /var/log/slurm, /var/log/munge and
    /var/log/mysql.
    """


@testbed.command()
@click.option(
    "--timeout", type=FiniteFloat(min=0, min_open=True), default=120.0, show_default=True, help="Seconds each daemon gets to come up."
)
def up(timeout: float) -> None:
    """Install, configure and start what is missing; quick when already up."""
    start = time.monotonic()
    s = LocalSlurmSettings.for_this_machine()
    Testbed(s, say=_say, timeout=timeout).up()
    click.echo(
        f"testbed up in {time.monotonic() - start:.1f} s: cluster {s.cluster_name}, partition {s.partition} "
        f"({','.join(s.nodes)}), account {s.account}"
    )


@testbed.command()
@click.option("--all", "everything", is_flag=True, help="Also stop MariaDB and munge (left running by default).")
def down(everything: bool) -> None:
    """Stop the Slurm daemons (slurmd x2, slurmctld, slurmdbd)."""
    Testbed(LocalSlurmSettings.for_this_machine(), say=_say).down(everything)
    click.echo("testbed down" + ("" if everything else " (munge and MariaDB left running)"))


@testbed.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """One line per component; exit 0 if all are up, else 1."""
    rows = Testbed(LocalSlurmSettings.for_this_machine()).status()
    for name, ok, detail in rows:
        click.echo(f"{name:<10} {'up' if ok else 'down':<5} {detail}")
    ctx.exit(0 if all(ok for _, ok, _ in rows) else 1)
