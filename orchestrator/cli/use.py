"""``orchestrator use`` and ``orchestrator exp run``: switch a project to a cluster.

DVC resolves dvc.yaml from params.yaml before the orchestrator runs, so a cluster's
values (``clusters.NAME``) run only once they are written there (``use``) or passed to
``dvc exp run -S`` (``exp run``); ``dvc exp show`` and ``dvc params diff`` then show
them as the run's params. The switch itself is :func:`orchestrator.config.params.switch`.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    prm = params.load(project)
    sw = params.switch(prm, cluster)
    changes = sw.changes(prm)
    if not changes and sw.kept is None:
        click.echo(f"{params.PARAMS_FILE} already holds {cluster}'s values")
        return
    text = _written(path, prm, sw)
    files.atomic_write(path, text, mode=path.stat().st_mode & 0o7777)
    entry = f"clusters.{sw.key}" if sw.key else "no clusters entry"
    click.echo(f"{params.PARAMS_FILE}: switched to {cluster} ({entry}; {len(changes)} value(s) changed)")
    for key, value in changes:
        click.echo(f"  {'.'.join(key)}: {params._short(value)}")
    if sw.kept is not None:
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
    cluster is refused before DVC runs.
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
    sets = params.dvc_sets(prm, name)
    theirs = _set_keys(dvc_args)
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


def _written(path: Path, prm: params.Params, sw: params.Switch) -> str:
    """params.yaml's text with the switch made, its comments and layout kept where the values stay
    (ruamel's round trip, as DVC's own -S writes it); checked to read back as the switch says."""
    from ruamel.yaml import YAML

    from orchestrator.util import files, yamlio

    yaml = YAML()  # round trip
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    yaml.preserve_quotes = True
    yaml.representer.add_representer(_Null, _represent_null)
    original = files.read_text(path, yamlio.MAX_FILE_BYTES, follow_symlinks=True)
    doc = yaml.load(original)
    _keep_written_nulls(doc, yaml.compose(original))
    for key, value in sw.changes(prm):
        _assign(doc, key, value)
    if sw.kept is not None:
        for key, value in params._leaves(params._changes(params._plain(prm.overlays.get(params.HOME, {})), sw.kept)):
            _assign(doc, ("clusters", params.HOME, *key), value)
    out = io.StringIO()
    yaml.dump(doc, out)
    text = out.getvalue()
    back = params.from_data(yamlio.load_text(text, str(path)), str(path))
    if params._top(back.data) != sw.top or (sw.kept is not None and params._plain(back.overlays.get(params.HOME)) != sw.kept):
        raise OrchestratorError(f"{path}: the switch did not read back as written (an alias shared with other values?); nothing written")
    return text


class _Null:
    """A null written ``null`` (``account: null``): ruamel writes None in a block mapping as nothing
    after the key, which reads as a value forgotten. The switch writes its own nulls so, and the
    file's own keep the form they have (:func:`_keep_written_nulls`)."""

    def __init__(self, spelled: str = "null") -> None:
        self.spelled = spelled


def _represent_null(representer: Any, null: _Null) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", null.spelled)


def _keep_written_nulls(doc: Any, node: Any) -> None:
    """Each null of ``doc`` that the file spells out (``null``, ``~``: ``node``, its composed
    YAML) made a :class:`_Null`, so that the round trip writes it back as it was, not empty."""
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(node, MappingNode):
        children = [(k.value, v) for k, v in node.value if isinstance(k, ScalarNode)]
    elif isinstance(node, SequenceNode):
        children = list(enumerate(node.value))
    else:
        return
    for key, child in children:
        try:
            value = doc[key]
        except (KeyError, IndexError, TypeError):
            continue
        if value is None and isinstance(child, ScalarNode) and child.value != "":
            doc[key] = _Null(child.value)
        elif value is not None:
            _keep_written_nulls(value, child)


def _explicit(value: Any) -> Any:
    """``value`` with each None a :class:`_Null`."""
    if value is None:
        return _Null()
    if isinstance(value, dict):
        return {k: _explicit(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_explicit(v) for v in value]
    return value


def _assign(doc: Any, key: tuple[str, ...], value: Any) -> None:
    """Set ``doc[key...]``, making the mappings on the way; a mapping that is also an alias
    elsewhere (a YAML anchor) is copied first, so that nothing else changes with it."""
    node = doc
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, Mapping):
            child = {}
        elif getattr(getattr(child, "anchor", None), "value", None):
            child = params._plain(child)
        node[part] = child
        node = child
    node[key[-1]] = _explicit(params._plain(value))
