"""The ``orchestrator`` command line.

Only click is imported at start-up; each command imports what it needs, so
``--help``, ``--version`` and ``clusters`` stay fast on a login node and never
touch torch, lightning or DVC's heavier parts.
"""

from __future__ import annotations

import sys

import click

from orchestrator import __version__
from orchestrator.errors import OrchestratorError


class _Group(click.Group):
    """Turns user errors into one message and a non-zero exit, never a traceback.

    Commands from other modules are imported only when used: ``orchestrator --help``
    lists them from the help text given here (a login node's start-up stays light)."""

    lazy: dict[str, tuple[str, str]] = {
        "testbed": ("orchestrator.cli.testbed:testbed", "A real two-node Slurm cluster on this machine: up, down, status."),
        "container": ("orchestrator.cli.container:container", "Container images: build the image jobs run in."),
        "remote": ("orchestrator.cli.remote:remote", "The project on the cluster's login node: sync, attach, shell (see --remote)."),
        "fetch": ("orchestrator.cli.remote:fetch", "Bring finished items' outputs and dvc.lock entries from the cluster, hash-checked."),
        "init": ("orchestrator.cli.init:init", "Add what an existing DVC project needs: params section, ignores, images.yaml."),
        "plan": ("orchestrator.cli.plan:plan", "Rank parallel layouts (data, tensor, pipeline, ZeRO) of a model."),
        "use": ("orchestrator.cli.use:use", "Switch the project to a cluster: write its values (clusters.NAME) into params.yaml."),
        "exp": ("orchestrator.cli.use:exp", "DVC experiments with a cluster's values: exp run --cluster NAME."),
        "report": ("orchestrator.cli.report:report", "Scaling report of the runs: speedup, efficiency, MFU, energy, CO2e."),
        "profile-diff": (
            "orchestrator.cli.profile_diff:profile_diff",
            "Compare two profiled runs' operators: calls and host time, baseline vs exp.",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str):
        if name in self.lazy:
            import importlib

            module, attr = self.lazy[name][0].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            elif (cmd := super().get_command(ctx, name)) is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OrchestratorError as exc:
            click.secho(f"error: {exc.render()}", err=True, fg="red")
            sys.exit(exc.exit_code)
        except OSError as exc:
            # A file the system refused (a read-only or pseudo file system, a full disk, a
            # name too long, a path through a file) is the user's to fix, wherever it
            # surfaced; an OSError naming no file is not known to be, so it stays a traceback.
            if exc.filename is None:
                raise
            from orchestrator.cli.options import file_error

            click.secho(f"error: {file_error(exc)}", err=True, fg="red")
            sys.exit(OrchestratorError.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="orchestrator")
def main() -> None:
    """Run DVC experiment matrices on Slurm clusters, in containers.

    Each DVC stage item that calls `orchestrator run` becomes one job, planned
    from a cluster profile (partitions, topology, container, environment).
    """


def _register() -> None:
    from orchestrator.cli import clusters, jobs, render

    main.add_command(clusters.clusters)
    main.add_command(render.render)
    for command in (jobs.run, jobs.submit, jobs.sweep, jobs.record, jobs.status, jobs.logs, jobs.show, jobs.cancel):
        main.add_command(command)


_register()
