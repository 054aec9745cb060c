"""``orchestrator use`` and ``orchestrator exp run``: switch a project to a cluster.

DVC resolves dvc.yaml from params.yaml before the orchestrator runs, so a cluster's
values (``clusters.NAME``) run only once they are written there (``use``) or passed to
``dvc exp run -S`` (``exp run``); ``dvc exp show`` and ``dvc params diff`` then show
them as the run's params. The switch itself is :func:`orchestrator.config.params.switch`.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click

from orchestrator.cli.options import WholeGroup, cluster_option, project_option
from orchestrator.config import params
from orchestrator.errors import ConfigError, OrchestratorError


@click.command()
@click.argument("cluster")
@project_option
def use(cluster: str, project: Path) -> None:
    """Switch the project to CLUSTER: write its values (clusters.CLUSTER) into params.yaml.

    They become params.yaml's top-level values and orchestrator.cluster names CLUSTER, so
    that DVC resolves and runs them. The values replaced are kept under clusters.local; `orchestrator use local` puts them
    back. `orchestrator render --cluster CLUSTER` shows the result first.
    """
    _not_empty(cluster)
    _known(cluster)
    from orchestrator.util import files

    path = files.edit_target(project, project / params.PARAMS_FILE)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: `orchestrator use` switches the values in a project's {params.PARAMS_FILE}")
    from orchestrator.config import switching
    from orchestrator.util import yamlio

    text = yamlio.read_file(path)
    done = switching.written(text, cluster, str(path))
    if done.text == text:
        click.echo(f"{params.PARAMS_FILE} already holds {cluster}'s values")
        return
    files.atomic_write(path, done.text, mode=path.stat().st_mode & 0o7777)
    entry = f"clusters.{done.entry}" if done.entry else "no clusters entry"
    click.echo(f"{params.PARAMS_FILE}: switched to {cluster} ({entry}; {len(done.changes)} value(s) changed)")
    for changed, value in done.changes:
        click.echo(f"  {'.'.join(changed)}: {params._short(value)}")
    if done.keeps:
        click.echo(f"  the values replaced are kept under clusters.{params.HOME} (`orchestrator use {params.HOME}` puts them back)")


@click.group(cls=WholeGroup)
def exp() -> None:
    """DVC experiments on a cluster, with its values."""


@exp.command(name="run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@cluster_option("The cluster whose values (clusters.NAME) the experiment runs with", default=None, old_short=False)
@click.option("--print", "print_only", is_flag=True, help="Print the dvc exp run command line; run nothing.")
@project_option
@click.argument("dvc_args", nargs=-1, type=click.UNPROCESSED)
def exp_run(cluster: str | None, print_only: bool, project: Path, dvc_args: tuple[str, ...]) -> None:
    """`dvc exp run DVC_ARGS` with -S for each of the cluster's values.

    `orchestrator exp run --cluster lumi -n on-lumi`: the experiment's params.yaml holds
    them (dvc exp show); as with any dvc exp run, the workspace keeps them unless --temp or --queue.
    --cluster, --print and --project are this command's wherever they stand before a `--`;
    a -S of yours for a key the cluster sets wins over the cluster's value (said). An unknown
    cluster is refused before DVC runs. Values -S cannot carry as written (${...} text, which
    DVC's -S expands; dotted keys) run with params.yaml switched as `use` does instead, put back
    after --temp or --queue.
    """
    dvc_args, ours = _own_options(dvc_args)
    cluster = ours.get("cluster", cluster)
    print_only = print_only or "print" in ours
    project = Path(ours.get("project", project))
    if cluster is not None:
        _not_empty(cluster)
    prm = params.load(project)
    name = cluster or prm.named_cluster(None)
    if not name:
        raise OrchestratorError("no cluster given: name the one whose values the experiment runs with, e.g. --cluster lumi")
    _known(name)
    theirs = _set_keys(dvc_args)
    try:
        sets = params.dvc_sets(prm, name)
    except params.NotSendable as refused:
        if theirs and any("${" in problem for problem in refused.problems):
            raise  # DVC's -S, yours too, writes the whole file back resolved
        _run_switched(project, name, dvc_args, print_only)
        return
    for given in [s for s in sets if _set_key(s) in theirs]:
        click.echo(f"orchestrator: your -S {_set_key(given)}=... wins over {name}'s ({given})", err=True)
    sets = [s for s in sets if _set_key(s) not in theirs]
    command = ["dvc", "exp", "run", *dvc_args, *(arg for s in sets for arg in ("-S", s))]
    if print_only:
        click.echo(shlex.join(command))
        return
    from orchestrator.pipeline import dvcfiles

    dvcfiles.require_readable(project)  # DVC would stop on it with its own words, not the way back
    dvcfiles.keep(project)  # -S rewrites params.yaml in place: a readable copy first
    click.echo(f"orchestrator: {shlex.join(command)}", err=True)
    try:
        done = subprocess.run(command, cwd=project, check=False)
    except FileNotFoundError:
        raise OrchestratorError("dvc is not installed here (the dvc command was not found)") from None
    sys.exit(done.returncode)


def _run_switched(project: Path, cluster: str, dvc_args: tuple[str, ...], print_only: bool) -> None:
    """`dvc exp run DVC_ARGS` with params.yaml switched to ``cluster`` as `use` switches it, for
    values -S cannot carry as they are (``${...}`` text, which DVC's -S resolves through OmegaConf
    and writes back expanded; keys with dots). The experiment holds the cluster's values as
    written; with --temp or --queue the workspace's params.yaml is put back once DVC has taken
    its copy (unless it was changed meanwhile), in the workspace it stays switched, as -S leaves it."""
    from orchestrator.config import switching
    from orchestrator.util import files, yamlio

    command = ["dvc", "exp", "run", *dvc_args]
    before = dvc_args[: dvc_args.index("--")] if "--" in dvc_args else dvc_args
    elsewhere = any(a in ("--temp", "--queue") for a in before)
    if print_only:
        put_back = "  # params.yaml put back as it was after" if elsewhere else ""
        click.echo(f"orchestrator use {shlex.quote(cluster)} && {shlex.join(command)}{put_back}")
        return
    from orchestrator.pipeline import dvcfiles

    path = files.edit_target(project, project / params.PARAMS_FILE)
    text = yamlio.read_file(path)
    switched = switching.written(text, cluster, str(path)).text
    dvcfiles.require_readable(project)
    dvcfiles.keep(project)
    mode = path.stat().st_mode & 0o7777
    click.echo(
        f"orchestrator: values -S cannot carry as written: params.yaml switched to {cluster} for `{shlex.join(command)}`"
        + (", put back after" if elsewhere else ""),
        err=True,
    )
    files.atomic_write(path, switched, mode=mode)
    try:
        done = subprocess.run(command, cwd=project, check=False)
    except FileNotFoundError:
        done = None
    finally:
        if elsewhere:
            if yamlio.read_file(path) == switched:
                files.atomic_write(path, text, mode=mode)
            else:
                click.echo(f"orchestrator: {params.PARAMS_FILE} changed while the experiment ran: left as it is", err=True)
    if done is None:
        raise OrchestratorError("dvc is not installed here (the dvc command was not found)")
    sys.exit(done.returncode)


def _own_options(args: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``exp run``'s own options that stand among DVC's arguments (`-n x --print`), taken out,
    up to a ``--`` (after it, everything is DVC's). DVC's ``exp run`` has none of these names."""
    rest: list[str] = []
    ours: dict[str, str] = {}
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            rest += [word, *words]
            break
        name, eq, value = word.partition("=")
        if word == "--print":
            ours["print"] = ""
        elif name in ("--cluster", "--project") and eq:
            ours[name[2:]] = value
        elif word in ("--cluster", "--project"):
            if not words:
                raise click.UsageError(f"{word} needs a value")
            ours[word[2:]] = words.pop(0)
        else:
            rest.append(word)
    return tuple(rest), ours


def _set_key(override: str) -> str:
    """The key a Hydra override (``-S`` value) sets: ``+a.b=1``, ``a.b=1``, ``file:a.b=1``."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.split(":", 1)[1] if ":" in key and not key.startswith(("/", ".")) else key


def _set_keys(args: tuple[str, ...]) -> set[str]:
    """The keys the user's own ``-S``/``--set-param`` among ``args`` set."""
    found = set()
    for i, word in enumerate(args):
        if word == "--":
            break
        if word in ("-S", "--set-param") and i + 1 < len(args):
            found.add(_set_key(args[i + 1]))
        elif word.startswith("--set-param="):
            found.add(_set_key(word.split("=", 1)[1]))
        elif word.startswith("-S") and len(word) > 2:
            found.add(_set_key(word[2:]))
    return found


def _known(cluster: str) -> None:
    """ProfileError (exit 2, the valid choices) unless ``cluster`` names a profile: checked
    before anything is written or sent, not at the next render."""
    from orchestrator.config import profile

    profile.load(cluster)


def _not_empty(cluster: str) -> None:
    if not cluster.strip():
        raise OrchestratorError(f"{cluster!r} is empty: give a built-in profile name (orchestrator clusters) or a profile file")
