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

# Where the documentation is: there is no hosted site, the pages are the source's docs/ folder.
DOCS = "Documentation: the docs/ folder of the source, as a site with `pip install -e '.[docs]' && mkdocs serve`."

# Every command: its "module:attribute" under orchestrator.cli and its one-line summary. --help prints these
# summaries without importing a command's module (a login node's start-up stays light);
# tests/unit/cli/test_cli_grammar.py checks each is its command's own first docstring line.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init:init", "Add what an existing DVC project needs (params, ignores, images.yaml); change nothing else."),
    "clusters": ("clusters:clusters", "List the built-in cluster profiles (or `show` one)."),
    "use": ("use:use", "Switch the project to CLUSTER: write its values (clusters.CLUSTER) into params.yaml."),
    "layout": ("layout:layout", "Rank the data x tensor x pipeline (x ZeRO) layouts of a model on GPUS GPUs."),
    "render": ("render:render", "Write the job script of every matrix item that calls `orchestrator run`."),
    "run": ("jobs:run", "Run one job: what a DVC stage's cmd calls for a matrix item."),
    "smoke": ("smoke:smoke", "Smoke-test every job shape of TARGETS: one two-minute job each, on the debug queue."),
    "submit": ("jobs:submit", "Submit every stale orchestrated item at once and return (you may log out)."),
    "sweep": ("jobs:sweep", "Submit a grid search at once and return; its points become DVC experiments."),
    "exp": ("use:exp", "DVC experiments on a cluster, with its values."),
    "status": ("jobs:status", "One table of the submitted items: state, job id, nodes, elapsed, exit code."),
    "logs": ("jobs:logs", "Print the log of ITEM's newest job."),
    "show": ("jobs:show", "How ITEM's newest job was produced: code, profile, script, job, nodes; and how to re-run it."),
    "cancel": ("jobs:cancel", "Cancel the running and pending jobs of TARGETS (default: all submitted items)."),
    "record": ("jobs:record", "Record in dvc.lock every orchestrated item of TARGETS whose job succeeded."),
    "fetch": ("remote:fetch", "Bring the finished items' outputs and dvc.lock entries from the cluster's project folder here."),
    "report": ("report:report", "Scaling report of STAGES (default: every stage with a run that has a throughput)."),
    "profile-diff": (
        "profile_diff:profile_diff",
        "Compare the profiled operators of two runs: calls and host time per step, largest change first.",
    ),
    "container": ("container:container", "Container images: build the image jobs run in (containers/images.yaml)."),
    "remote": ("remote:remote", "The project on the cluster's login node: send it, follow a command there, open a shell there."),
    "testbed": ("testbed:testbed", "A real two-node Slurm cluster on this machine (profile `testbed`), for tests."),
}
# The commands by the workflow step they belong to, in --help's order.
SECTIONS: dict[str, tuple[str, ...]] = {
    "Set up": ("init", "clusters", "use", "layout"),
    "Run": ("render", "run", "smoke", "submit", "sweep", "exp"),
    "Follow": ("status", "logs", "show", "cancel"),
    "Results": ("record", "fetch", "report", "profile-diff"),
    "Images": ("container",),
    "Remote": ("remote",),
    "Development": ("testbed",),
}

# Old command names, kept for one release: each says its new name on stderr, then runs it.
RENAMED = {"plan": "layout"}


class _Group(click.Group):
    """Turns user errors into one message and a non-zero exit, never a traceback.

    Every command's module is imported only when that command is used: ``orchestrator --help``
    lists them from SECTIONS, grouped by workflow step, each summary whole."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for names in SECTIONS.values() for name in names]

    def get_command(self, ctx: click.Context, name: str):
        if name in RENAMED:
            click.echo(f"orchestrator: `{name}` is now `{RENAMED[name]}`; the old name goes in the next release", err=True)
            name = RENAMED[name]
        if name in COMMANDS:
            import importlib

            module, attr = COMMANDS[name][0].split(":")
            return getattr(importlib.import_module(f"orchestrator.cli.{module}"), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = max(map(len, COMMANDS))  # one column for every section
        for title, names in SECTIONS.items():
            with formatter.section(title):
                formatter.write_dl([(name.ljust(width), COMMANDS[name][1]) for name in names])

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        formatter.write_text(DOCS)

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
