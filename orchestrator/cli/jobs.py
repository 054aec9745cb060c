"""The job commands: `run` one item (what a DVC stage calls), `submit` all and leave, then `status`, `logs`, `show`, `cancel`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import FiniteFloat, cluster_option, deprecated_short, project_option, table
from orchestrator.cli.remote import forwarded, hinting, remote_option, run_remote
from orchestrator.errors import OrchestratorError
from orchestrator.pipeline.runargs import run_options, spec_from_options

if TYPE_CHECKING:
    from orchestrator.scripts.plan import Form  # click's Choice gives one of its values

# --next-wave: the first wave's submission time (seconds since 1970), which items' jobs are compared with.
SINCE = FiniteFloat(min=0)


# The commands that read the ledger need no profile here; with --remote, the cluster names the login node,
# as it does for submit --remote (`submit --remote --cluster lumi` then `status --remote --cluster lumi`).
REMOTE_CLUSTER = "With --remote: the cluster whose login node runs it"
REMOTE_CLUSTER_DEFAULT = "params.yaml's orchestrator.cluster"


@click.command(context_settings={"allow_interspersed_args": False})
@run_options
@cluster_option(old_short=False)
@click.option(
    "--form", type=click.Choice(["sbatch", "srun", "local"]), default=None, show_default="the profile's launcher", help="Script form."
)
@click.option("--name", default=None, help="Item name outside DVC (inside a stage DVC_STAGE names it).")
def run(cluster: str | None, form: Form | None, name: str | None, **options) -> None:
    """Run one job: what a DVC stage's cmd calls for a matrix item.

    Plans and renders the item's script (the one `orchestrator render` shows),
    attaches to a job already submitted with the same script and inputs (pending,
    running, or finished with its outputs still there), or submits one, waits, and
    checks the stage's outputs exist. A new job although one succeeded: `dvc repro -f`,
    or ORCH_FORCE=1 in the environment.
    """
    from orchestrator.jobs import foreground
    from orchestrator.util.runner import SubprocessRunner

    ctx = foreground.Context.from_environment(name)
    foreground.run_item(ctx, spec_from_options(options), cluster, form, SubprocessRunner())


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option()
@project_option
@click.option(
    "--force",
    is_flag=True,
    help="Submit every orchestrated item of TARGETS again, also those whose last job succeeded (like `dvc repro -f`).",
)
# -f is `logs --follow` (tail -f); submit's -f stays for one release, saying so.
@click.option("-f", "old_force", is_flag=True, hidden=True, callback=deprecated_short("--force (-f is logs --follow)"))
@remote_option
@click.option("--with-changes", is_flag=True, help="With --remote: also send the uncommitted changes (tracked, and untracked not ignored).")
# The recording job's, when the site's MaxSubmitJobs cut the submission into waves: the
# first wave's submission time (items with a job since then are not submitted again).
@click.option("--next-wave", "since", type=SINCE, default=None, hidden=True)
def submit(
    targets: tuple[str, ...],
    cluster: str | None,
    project: Path,
    force: bool,
    old_force: bool,
    remote: bool,
    with_changes: bool,
    since: float | None,
) -> None:
    """Submit every stale orchestrated item at once and return (you may log out).

    Downstream items wait for their upstream jobs (--dependency=afterok). A last
    small job records the results in DVC when all have ended (profiles with a
    service_partition); otherwise run `dvc repro` then: it attaches to the jobs.
    Where the site's MaxSubmitJobs leaves too little room, the items go in waves: each
    recording job submits the next.

    With --remote, from a workstation: the committed state is sent to the project's
    folder on the login node (`orchestrator remote sync`), and the submit runs there,
    detached; its output streams here. Cut off, it finishes there; run it again to follow it.
    """
    from orchestrator.jobs import detached
    from orchestrator.jobs.recorder import NO_WAVE_LEFT
    from orchestrator.util.runner import SubprocessRunner

    force = force or old_force

    if with_changes and not remote:
        raise OrchestratorError("--with-changes goes with --remote (it says what to send to the login node)")
    if remote:
        _require_switched(project, cluster)
        argv = forwarded("submit", [*([f"--cluster={cluster}"] if cluster else []), *(["--force"] if force else [])], targets)
        return run_remote(project, cluster, argv, sync=True, with_changes=with_changes)
    say = lambda line: click.echo(f"orchestrator: {line}", err=True)  # noqa: E731
    with hinting(project, cluster):
        done = detached.submit(project, cluster, SubprocessRunner(), targets, say=say, force=force, since=since)
    if not done:
        if since is not None:
            sys.exit(NO_WAVE_LEFT)
        click.echo("nothing to submit: every orchestrated stage is up to date")
        return
    rows = [(s.item, s.job_id, ("attached, " if s.attached else "") + s.state.value, ",".join(s.after) or "-") for s in done]
    rows = [(row[0], "-", "next wave", "-") if s.deferred else row for s, row in zip(done, rows, strict=True)]
    table(("item", "job", "state", "after"), rows)


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--set-param", "-S", "sets", multiple=True, help="A param and its values, in DVC's sweep syntax (`dvc exp run -S`).")
@click.option(
    "--name", "-n", default=None, show_default="from HEAD and -S", help="The sweep's name; its experiments are NAME-0, NAME-1, ..."
)
@click.option("--record", "record_name", default=None, metavar="NAME", help="Record sweep NAME's finished points as DVC experiments.")
# The sweep's recording job's: points not saved because an item's job failed, was cancelled or
# never ran are listed, not its failure; only the recording's own (a copy gone, DVC refused) is.
@click.option("--recording-job", is_flag=True, hidden=True)
@cluster_option()
@project_option
@remote_option
@click.option("--with-changes", is_flag=True, help="With --remote: also send the uncommitted changes (tracked, and untracked not ignored).")
# The sweep's recording job's, when the site's MaxSubmitJobs cut it into waves (with --name).
@click.option("--next-wave", "since", type=SINCE, default=None, hidden=True)
def sweep(
    targets: tuple[str, ...],
    sets: tuple[str, ...],
    name: str | None,
    record_name: str | None,
    recording_job: bool,
    cluster: str | None,
    project: Path,
    remote: bool,
    with_changes: bool,
    since: float | None,
) -> None:
    """Submit a grid search at once and return; its points become DVC experiments.

    Each point of `-S 'lr=0.1,0.2' -S 'seed=range(0,3)'` (DVC's syntax and parser) is a
    copy of the project at HEAD with those params, and every point's stale items are
    submitted together. When the jobs end, the sweep's recording job (or `orchestrator
    sweep --record NAME` by hand) records each point whose items all succeeded and saves
    it with `dvc exp save`: `dvc exp show` lists it. Run the same command again to
    submit the points that failed; saved points are not submitted again. Where the
    site's MaxSubmitJobs leaves too little room, the items go in waves: each recording
    job saves what has finished and submits the next.

    With --remote, from a workstation: as `submit --remote`, the committed state is sent
    to the login node and the sweep runs there, detached; its output streams here.
    """
    from orchestrator.jobs import sweep as sw
    from orchestrator.jobs.recorder import NO_WAVE_LEFT

    if with_changes and not remote:
        raise OrchestratorError("--with-changes goes with --remote (it says what to send to the login node)")
    if name is not None:
        sw.check_name(name)  # before anything is read or sent: an empty name is refused, not dropped
    if remote:
        _require_switched(project, cluster)
        given = [f"--cluster={cluster}"] if cluster else []
        given += [f"--set-param={s}" for s in sets] + ([f"--name={name}"] if name is not None else [])
        given += [f"--record={record_name}"] if record_name is not None else []
        return run_remote(project, cluster, forwarded("sweep", given, targets), sync=record_name is None, with_changes=with_changes)
    from orchestrator.util.runner import SubprocessRunner

    say = lambda line: click.echo(f"orchestrator: {line}", err=True)  # noqa: E731
    if record_name is not None:
        found = sw.record_points(project, cluster, SubprocessRunner(), record_name, say=say)
        rows = [(n, "saved") for n in found.saved] + [(n, f"not finished: {w}") for n, w in found.unfinished]
        rows += [(n, f"failed: {w}") for n, w in found.failed]
        table(("experiment", "result"), rows)
        click.echo(f"{len(found.saved)} saved, {len(found.unfinished)} not finished, {len(found.failed)} failed")
        if recording_job and found.failed and not found.errors:
            click.echo("recording job: what was not saved is no failure of the recording: the same `orchestrator sweep` submits it again")
        if found.errors or (found.failed and not recording_job):
            sys.exit(1)
        return
    if since is not None:
        if name is None:
            raise OrchestratorError("--next-wave needs the sweep's --name")
        wave = sw.next_wave(project, cluster, SubprocessRunner(), name, since, say=say)
        if wave is None:
            sys.exit(NO_WAVE_LEFT)
        return
    made, jobs, recorder = sw.submit(project, cluster, SubprocessRunner(), sets, targets, name, say=say)

    def items(point) -> str:
        if point.saved:
            return "saved"
        rows = jobs.get(point.name, [])
        later = sum(j.deferred for j in rows)
        return f"{len(rows)} ({later} in a later wave)" if later else str(len(rows))

    points = [(p.name, " ".join(o for os_ in p.overrides.values() for o in os_), items(p)) for p in made.points]
    table(("experiment", "params", "items"), points)
    click.echo(f"sweep {made.name}: {len(made.points)} points" + (f"; recording job {recorder.job_id}" if recorder else ""))


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option()
@project_option
@remote_option
# The recording job's last step, after its `dvc repro --keep-going` exited N: items whose jobs
# did not succeed (and what is after them) are reported, and only a real failure fails the job.
@click.option("--repro-exit", type=int, default=None, hidden=True)
def record(targets: tuple[str, ...], cluster: str | None, project: Path, remote: bool, repro_exit: int | None) -> None:
    """Record in dvc.lock every orchestrated item of TARGETS whose job succeeded.

    One load of the DVC project and one scheduler query for all items, where `dvc
    repro` would start an `orchestrator run` per stage; the lock is the one `dvc repro`
    writes. Failed items are listed with their job and log; unfinished ones are left.
    The recording job of `orchestrator submit` runs it, then `dvc repro` for the rest;
    items whose jobs failed, were cancelled or never ran are listed in its log, not
    taken for its failure: it fails only when the recording does (DVC stopped, or a
    stage failed with nothing unrecorded upstream of it).

    It is also the way back, on every profile, when a DVC process killed while it wrote
    dvc.lock or .dvc/tmp/rwlock left one cut short (DVC then stops on it: "'./dvc.lock'
    validation failed", "Unable to read RWLock-file"): the last readable dvc.lock is put
    back (the cut file kept in .orchestrator/kept/cut/) and the items that finished
    since are recorded from the ledger. Then `dvc repro` goes on.
    """
    if remote:
        return run_remote(project, cluster, forwarded("record", [], targets))
    from orchestrator.jobs import record as rec
    from orchestrator.util.runner import SubprocessRunner

    if repro_exit is not None:
        verdict = rec.verdict(rec.record(project, cluster, SubprocessRunner(), targets, settle=True), repro_exit)
        for line in verdict.lines:
            click.echo(f"recording job: {line}")
        sys.exit(0 if verdict.ok else 1)
    found = rec.record(project, cluster, SubprocessRunner(), targets)
    rows = [(name, "recorded") for name in found.recorded] + [(name, "up to date") for name in found.up_to_date]
    rows += [(name, f"not finished: {why}") for name, why in found.unfinished] + [(name, f"failed: {why}") for name, why in found.failed]
    if len(rows) <= 40:
        table(("item", "result"), rows)
    click.echo(
        f"{len(found.recorded)} recorded, {len(found.up_to_date)} up to date, "
        f"{len(found.unfinished)} not finished, {len(found.failed)} failed"
    )
    if found.failed:
        sys.exit(1)


# More rows than this and `status` leaves out array tasks that are pending or completed.
SHOWN_ROWS = 60


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--watch", "-w", is_flag=True, help="Refresh until every job has ended (polling backs off).")
@click.option(
    "--all", "-a", "all_rows", is_flag=True,
    help=f"List every array task, also past {SHOWN_ROWS} rows, and the items that have left dvc.yaml.",
)  # fmt: skip
@click.option("--sweep", "sweep_name", default=None, metavar="NAME", help="The items of sweep NAME's points not yet saved as experiments.")
@project_option
@remote_option
@cluster_option(REMOTE_CLUSTER, default=REMOTE_CLUSTER_DEFAULT)
def status(
    targets: tuple[str, ...], watch: bool, all_rows: bool, sweep_name: str | None, project: Path, remote: bool, cluster: str | None
) -> None:
    """One table of the submitted items: state, job id, nodes, elapsed, exit code.

    Job arrays get a line each (tasks per state). Past 60 rows, the array tasks
    that are pending or completed are left out of the table (running and failed ones stay).
    Items no longer in dvc.yaml whose jobs have ended are left out too, and counted.
    """
    import time

    if remote:
        flags = [*(["--watch"] if watch else []), *(["--all"] if all_rows else []), *([f"--sweep={sweep_name}"] if sweep_name else [])]
        return run_remote(project, cluster, forwarded("status", flags, targets))

    from orchestrator.jobs import follow
    from orchestrator.jobs import status as st
    from orchestrator.pipeline import stages
    from orchestrator.slurm.states import State
    from orchestrator.slurm.times import hms
    from orchestrator.util.runner import SubprocessRunner

    runner, interval = SubprocessRunner(), 2.0
    points: list[tuple[Path, str]] = []
    if sweep_name is not None:
        made, points = follow.open_points(project, sweep_name)
        click.echo(f"sweep {made.name}: {len(made.points)} points, {sum(p.saved for p in made.points)} saved as experiments")
    # Items named or --all: every row the ledger has; else not those that left dvc.yaml and ended.
    current = None if targets or all_rows or sweep_name is not None else stages.item_names(project)
    while True:
        with hinting(project, cluster):
            rows = st.refresh_all(points, runner) if sweep_name is not None else st.refresh(project, runner, targets)
        rows, gone = st.departed(rows, current)
        if not rows and not gone and sweep_name is None:
            # A bare header would read as "something is wrong": say what fills the table.
            what = f"no submitted item matches {' '.join(targets)}" if targets else "nothing submitted from this project yet"
            click.echo(
                f"{what}: `dvc repro` (one process here, jobs through `orchestrator run`) or `orchestrator submit` puts items "
                "here; what was submitted from a workstation (`submit --remote`) is listed by `orchestrator status --remote`"
            )
            return
        arrays = st.summaries(rows)
        if len(rows) > SHOWN_ROWS and not all_rows:
            # A sweep's hundreds of tasks: one row per array (`--all` or an item name lists them).
            rows = [r for r in rows if "_" not in r.job_id or r.state not in (State.PENDING, State.COMPLETED)]
        columns = ["item", "state", "job", "nodes", "elapsed", "exit", "MFU", "submissions"]
        cells = [
            [
                r.item,
                r.state.value,
                r.job_id,
                r.nodes,
                hms(r.elapsed_s),
                "-" if r.exit_code is None else str(r.exit_code),
                "-" if r.mfu is None else f"{r.mfu:.1%}",
                str(r.submissions),
            ]
            for r in rows
        ]
        if any(r.node_faults or r.avoiding for r in rows):  # only when a node failed
            columns.append("node faults")
            for r, row in zip(rows, cells, strict=True):
                row.append(
                    f"{r.node_faults} retried" + (f", avoiding {','.join(r.avoiding)}" if r.avoiding else "")
                    if r.node_faults or r.avoiding
                    else "-"
                )
        if any(r.reason or r.recovered for r in rows):  # only when something waits or was repaired
            columns.append("note")
            for r, row in zip(rows, cells, strict=True):
                row.append("; ".join(filter(None, [r.reason, r.recovered])) or "-")
        table(tuple(columns), [tuple(c) for c in cells])
        for a in arrays:
            click.echo(f"array {a.array_id}: {a.tasks} tasks ({a.items}): {a.states}")
        if gone:
            names = ", ".join(r.item for r in gone[:4]) + (", ..." if len(gone) > 4 else "")
            click.echo(f"{len(gone)} ended item(s) no longer in dvc.yaml left out ({names}): `status --all` lists them")
        for r in rows:
            waiting = follow.waiting(project, r) if r.state.active else 0
            if waiting:
                click.echo(f"{waiting} item(s) wait for a later wave (MaxSubmitJobs): recording job {r.job_id} submits it when these end")
        for r in rows:
            if r.stuck:
                click.echo(f"orchestrator: {r.item}: job {r.job_id} will not start by itself ({r.reason}): {r.stuck}", err=True)
        if not watch or not any(r.state.active for r in rows):
            return
        time.sleep(interval)
        interval = min(interval * 1.5, 60.0)
        click.echo()


@click.command()
@click.argument("item")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the job writes, until it ends.")
@project_option
@remote_option
@cluster_option(REMOTE_CLUSTER, default=REMOTE_CLUSTER_DEFAULT)
def logs(item: str, follow: bool, project: Path, remote: bool, cluster: str | None) -> None:
    """Print the log of ITEM's newest job."""
    if remote:
        return run_remote(project, cluster, forwarded("logs", ["--follow"] if follow else [], [item]))

    from orchestrator.jobs import follow as jobs_follow
    from orchestrator.jobs import status as st
    from orchestrator.util.runner import SubprocessRunner

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    if not jobs_follow.log(project, item, SubprocessRunner(), follow, write):
        with hinting(project, cluster):
            raise OrchestratorError(f"{item}: no log yet at {st.log_path(project, item)} (the job may still be pending)")


@click.command()
@click.argument("item")
@project_option
@remote_option
@cluster_option(REMOTE_CLUSTER, default=REMOTE_CLUSTER_DEFAULT)
def show(item: str, project: Path, remote: bool, cluster: str | None) -> None:
    """How ITEM's newest job was produced: code, profile, script, job, nodes; and how to re-run it."""
    from orchestrator.jobs import ledger, provenance
    from orchestrator.jobs import status as st
    from orchestrator.util import yamlio

    if remote:
        return run_remote(project, cluster, forwarded("show", [], [item]))
    with hinting(project, cluster):
        record = st.one(project, item)
    click.echo(yamlio.dump(provenance.of(record, ledger.Ledger(project).records(record.item))), nl=False)


@click.command()
@click.argument("targets", nargs=-1)
@project_option
@remote_option
@cluster_option(REMOTE_CLUSTER, default=REMOTE_CLUSTER_DEFAULT)
def cancel(targets: tuple[str, ...], project: Path, remote: bool, cluster: str | None) -> None:
    """Cancel the running and pending jobs of TARGETS (default: all submitted items)."""
    from orchestrator.jobs import status as st
    from orchestrator.util.runner import SubprocessRunner

    if remote:
        return run_remote(project, cluster, forwarded("cancel", [], targets))
    with hinting(project, cluster):
        ids = st.cancel(project, SubprocessRunner(), targets)
    click.echo(f"cancelled {len(ids)} job(s){': ' + ' '.join(ids) if ids else ''}")


def _require_switched(project: Path, cluster: str | None) -> None:
    """Before anything is sent: the cluster --remote submits on must be the one params.yaml's values are for."""
    from orchestrator.config import params
    from orchestrator.remote import destination

    if not (project / params.PARAMS_FILE).is_file():
        return  # run_remote says what is missing, as for every --remote command
    prm = params.load(project)
    try:
        name = destination.named_cluster(prm, cluster)
    except OrchestratorError:
        return  # no cluster named: run_remote's own message says how to name one
    params.require_switched(prm, name, "sent or submitted")
