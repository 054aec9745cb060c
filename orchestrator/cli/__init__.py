"""The ``orchestrator`` command line.

Only click is imported at start-up; each command imports what it needs, so
``--help``, ``--version`` and ``clusters`` stay fast on a login node and never
touch torch, lightning or DVC's heavier parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator import __version__
from orchestrator.errors import OrchestratorError
from orchestrator.pipeline.runargs import run_options, spec_from_options


class _Group(click.Group):
    """Turns user errors into one message and a non-zero exit, never a traceback.

    Commands from other modules are imported only when used: ``orchestrator --help``
    lists them from the help text given here (a login node's start-up stays light)."""

    lazy: dict[str, tuple[str, str]] = {
        "testbed": ("orchestrator.testbed.cluster:testbed", "A real two-node Slurm cluster on this machine: up, down, status."),
        "container": ("orchestrator.containers.build:container", "Container images: build the image jobs run in."),
        "plan": ("orchestrator.cli.plan:plan", "Rank parallel layouts (data, tensor, pipeline, ZeRO) of a model."),
        "report": ("orchestrator.cli.report:report", "Scaling report of the runs: speedup, efficiency, MFU, energy, CO2e."),
        "profile-diff": ("orchestrator.cli.profile_diff:profile_diff", "Compare two profiled runs' operators: calls and host time, baseline vs exp."),
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="orchestrator")
def main() -> None:
    """Run DVC experiment matrices on Slurm clusters, in containers.

    Each DVC stage item that calls `orchestrator run` becomes one job, planned
    from a cluster profile (partitions, topology, container, environment).
    """




project_option = click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The DVC project (folder with dvc.yaml).",
)


# --- clusters --------------------------------------------------------------------


@main.group(invoke_without_command=True)
@click.pass_context
def clusters(ctx: click.Context) -> None:
    """List the built-in cluster profiles (or `show` one)."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.config import profile

    rows = []
    for name in profile.builtin_names():
        p = profile.load(name).profile
        gpus = f"{p.node.gpus} x {p.node.gpu.model}" if p.node.gpus and p.node.gpu else str(p.node.gpus)
        rows.append((name, p.scheduler.kind, gpus, p.description))
    _table(("name", "scheduler", "GPUs per node", "description"), rows)
    click.echo("\nDetails: orchestrator clusters show NAME; a copy to edit: orchestrator clusters show NAME --format yaml")


@clusters.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "yaml"]), default="text", show_default=True)
def clusters_show(name: str, fmt: str) -> None:
    """Show a profile's topology and derived CPU binding (NAME or a profile file)."""
    from orchestrator.config import profile, topology

    loaded = profile.load(name)
    if fmt == "yaml":
        click.echo(loaded.text, nl=False)
        return
    click.echo(topology.describe(loaded))


# --- render ----------------------------------------------------------------------


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--cluster", "-c", default=None, help="Built-in profile name or profile file (default: params.yaml's orchestrator.cluster, else local).")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Output folder [default: .orchestrator/scripts/CLUSTER].")
@click.option("--form", type=click.Choice(["sbatch", "srun", "local"]), default=None, help="Script form (default: the profile's launcher).")
@click.option("--check", "do_check", is_flag=True, help="Check every plan and script (bash -n, shellcheck); exit non-zero on any problem.")
@click.option("--no-shellcheck", is_flag=True, help="With --check: skip shellcheck.")
@project_option
def render(targets: tuple[str, ...], cluster: str | None, out: Path | None, form: str | None, do_check: bool, no_shellcheck: bool, project: Path) -> None:
    """Write the job script of every matrix item that calls `orchestrator run`.

    TARGETS are stage names, item names (stage@...) or globs; default: all.
    Nothing is written unless every item could be planned (and, with --check,
    every script passed its checks).
    """
    from orchestrator.scripts import matrix
    from orchestrator.scripts.workspace import SCRIPTS_DIR
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    rendered = matrix.render_matrix(project, cluster, runner, targets, form)  # type: ignore[arg-type]
    if do_check:
        matrix.check_or_raise(rendered, runner, shellcheck=not no_shellcheck)
    out_dir = out or project / SCRIPTS_DIR / _dir_name(rendered.profile.name)
    matrix.write(rendered, out_dir, replace_all=not targets)
    _summary(rendered.plans)
    checked = " and checked" if do_check else ""
    click.echo(f"{len(rendered.scripts)} script(s) for {rendered.profile.name}{checked} in {out_dir}")


# --- run -----------------------------------------------------------------------


@main.command(context_settings={"allow_interspersed_args": False})
@run_options
@click.option("--cluster", "-c", default=None, help="Profile name or file (default: params.yaml, else Slurm's ClusterName, else local).")
@click.option("--form", type=click.Choice(["sbatch", "srun", "local"]), default=None, help="Script form (default: the profile's launcher).")
@click.option("--name", default=None, help="Item name outside DVC (inside a stage DVC_STAGE names it).")
def run(cluster: str | None, form: str | None, name: str | None, **options) -> None:
    """Run one job: what a DVC stage's cmd calls for a matrix item.

    Plans and renders the item's script (the one `orchestrator render` shows),
    attaches to a job already submitted with the same script and inputs, or
    submits one, waits, and checks the stage's outputs exist.
    """
    from orchestrator.jobs import foreground
    from orchestrator.util.runner import SubprocessRunner

    ctx = foreground.Context.from_environment(name)
    foreground.run_item(ctx, spec_from_options(options), cluster, form, SubprocessRunner())  # type: ignore[arg-type]


# --- submit ------------------------------------------------------------------------


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--cluster", "-c", default=None, help="Profile name or file (default: params.yaml, else Slurm's ClusterName).")
@project_option
def submit(targets: tuple[str, ...], cluster: str | None, project: Path) -> None:
    """Submit every stale orchestrated item at once and return (you may log out).

    Downstream items wait for their upstream jobs (--dependency=afterok). A last
    small job records the results in DVC when all have ended (profiles with a
    service_partition); otherwise run `dvc repro` then: it attaches to the jobs.
    """
    from orchestrator.jobs import detached
    from orchestrator.util.runner import SubprocessRunner

    done = detached.submit(project, cluster, SubprocessRunner(), targets, say=lambda line: click.echo(f"orchestrator: {line}", err=True))
    if not done:
        click.echo("nothing to submit: every orchestrated stage is up to date")
        return
    _table(
        ("item", "job", "state", "after"),
        [(s.item, s.job_id, ("attached, " if s.attached else "") + s.state.value, ",".join(s.after) or "-") for s in done],
    )


# --- status, logs, cancel ---------------------------------------------------------


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--watch", "-w", is_flag=True, help="Refresh until every job has ended (polling backs off).")
@project_option
def status(targets: tuple[str, ...], watch: bool, project: Path) -> None:
    """One table of the submitted items: state, job id, nodes, elapsed, exit code."""
    import time

    from orchestrator.jobs import status as st
    from orchestrator.slurm.times import hms
    from orchestrator.util.runner import SubprocessRunner

    runner, interval = SubprocessRunner(), 2.0
    while True:
        rows = st.refresh(project, runner, targets)
        columns = ["item", "state", "job", "nodes", "elapsed", "exit", "MFU", "submissions"]
        cells = [
            [r.item, r.state.value, r.job_id, r.nodes, hms(r.elapsed_s), "-" if r.exit_code is None else str(r.exit_code), "-" if r.mfu is None else f"{r.mfu:.1%}", str(r.submissions)]
            for r in rows
        ]
        if any(r.node_faults or r.avoiding for r in rows):  # only when a node failed
            columns.append("node faults")
            for r, row in zip(rows, cells, strict=True):
                row.append(f"{r.node_faults} retried" + (f", avoiding {','.join(r.avoiding)}" if r.avoiding else "") if r.node_faults or r.avoiding else "-")
        _table(tuple(columns), [tuple(c) for c in cells])
        if not watch or all(r.state.final for r in rows):
            return
        time.sleep(interval)
        interval = min(interval * 1.5, 60.0)
        click.echo()


@main.command()
@click.argument("item")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the job writes, until it ends.")
@project_option
def logs(item: str, follow: bool, project: Path) -> None:
    """Print the log of ITEM's newest job."""
    import time

    from orchestrator.jobs import status as st
    from orchestrator.util.runner import SubprocessRunner

    path = st.log_path(project, item)
    offset, idle = 0, 0.5
    while True:
        if path.exists():
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        if not follow:
            if not path.exists():
                raise OrchestratorError(f"{item}: no log yet at {path} (the job may still be pending)")
            return
        (row,) = st.refresh(project, SubprocessRunner(), [item])
        if row.state.final and path.exists() and path.stat().st_size == offset:
            return
        time.sleep(idle)
        idle = min(idle * 1.5, 10.0)


@main.command()
@click.argument("item")
@project_option
def show(item: str, project: Path) -> None:
    """How ITEM's newest job was produced: code, profile, script, job, nodes; and how to re-run it."""
    from orchestrator.jobs import ledger, provenance
    from orchestrator.jobs import status as st
    from orchestrator.util import yamlio

    record = st.one(project, item)
    click.echo(yamlio.dump(provenance.of(record, ledger.Ledger(project).records(record.item))), nl=False)


@main.command()
@click.argument("targets", nargs=-1)
@project_option
def cancel(targets: tuple[str, ...], project: Path) -> None:
    """Cancel the running and pending jobs of TARGETS (default: all submitted items)."""
    from orchestrator.jobs import status as st
    from orchestrator.util.runner import SubprocessRunner

    ids = st.cancel(project, SubprocessRunner(), targets)
    click.echo(f"cancelled {len(ids)} job(s){': ' + ' '.join(ids) if ids else ''}")


def _summary(plans, limit: int = 40) -> None:
    """A row per item for small matrices; per layout for big ones (a table of
    thousands of rows helps no one and costs half a second)."""
    if len(plans) <= limit:
        rows = [(p.item, f"{p.nodes}x{p.tasks_per_node}", p.partition or "-", p.time or "-") for p in plans]
        _table(("item", "nodes x tasks", "partition", "time"), rows)
        return
    counts: dict[tuple[str, str, str], int] = {}
    for p in plans:
        key = (f"{p.nodes}x{p.tasks_per_node}", p.partition or "-", p.time or "-")
        counts[key] = counts.get(key, 0) + 1
    _table(("items", "nodes x tasks", "partition", "time"), [(str(n), *key) for key, n in counts.items()])


def _dir_name(profile_name: str) -> str:
    from orchestrator.scripts.plan import safe_name

    return safe_name(profile_name)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*header, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*row)
    # Piped output (CI logs) gets whole lines, a terminal gets its own width.
    Console(width=None if sys.stdout.isatty() else 1000).print(table)
