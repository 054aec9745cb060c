"""One grammar across the CLI (issue 36): walked over the click tree, so a new command cannot drift.
Every command that can run on the login node (`--remote`) takes `--cluster`, which names that node,
as `submit --remote --cluster lumi` does: `status --remote` after it must reach the same place."""

from __future__ import annotations

import click
import pytest
from support import invoke

from orchestrator.cli import main


def commands(group: click.Group = main, prefix: str = "") -> list[tuple[str, click.Command]]:
    """Every command, lazy ones included (the top level imports none until asked); hidden old names left out."""
    found = []
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if command.hidden:
            continue
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix}{name} ")
    return found


def options(command: click.Command) -> set[str]:
    return {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def test_every_command_with_remote_takes_cluster():
    missing = [name for name, command in commands() if "--remote" in options(command) and "--cluster" not in options(command)]
    assert not missing, f"--remote without --cluster: {missing}"


@pytest.mark.parametrize("argv", [["status"], ["logs", "item"], ["show", "item"], ["cancel"]])
def test_remote_job_commands_reach_the_cluster_they_are_given(monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    reached: list[str | None] = []
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", lambda project, cluster, forwarded, **kw: reached.append(cluster))
    result = invoke(*argv[:1], "--remote", "--cluster", "lumi", *argv[1:])
    assert result.exit_code == 0, result.output
    assert reached == ["lumi"]


def shorts(command: click.Command) -> dict[str, str]:
    """A command's visible short flags and the long option each stands for (hidden ones are old spellings, kept a release)."""
    found = {}
    for p in command.params:
        if isinstance(p, click.Option) and not p.hidden:
            longs = [o for o in p.opts if o.startswith("--")]
            found |= {o: longs[0] if longs else o for o in p.opts if len(o) == 2}
    return found


def test_a_short_flag_means_one_thing_across_the_cli():
    meanings: dict[str, set[str]] = {}
    for _, command in commands():
        for short, long in shorts(command).items():
            meanings.setdefault(short, set()).add(long)
    assert {s: m for s, m in meanings.items() if len(m) > 1} == {}


def test_run_keeps_slurms_short_flags():
    (run,) = [c for name, c in commands() if name == "run"]
    slurm = {"-c": "--cpus", "-N": "--nodes", "-G": "--gpus-per-node", "-t": "--time", "-p": "--partition", "-A": "--account"}
    assert {s: shorts(run).get(s) for s in slurm} == slurm


@pytest.mark.parametrize(("argv", "said"), [(["status", "-c", "lumi"], "-c is now --cluster"), (["submit", "-f"], "-f is now --force")])
def test_old_short_spellings_still_work_for_a_release_and_say_the_new_one(monkeypatch, tmp_path, argv, said):
    monkeypatch.chdir(tmp_path)
    got: dict = {}
    record = lambda project, cluster, forwarded, **kw: got.update(cluster=cluster, argv=forwarded)  # noqa: E731
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", record)
    result = invoke(*argv, "--remote")
    assert result.exit_code == 0, result.output
    assert said in result.output
    assert got["cluster"] == "lumi" if "-c" in argv else "--force" in got["argv"]


def test_bad_values_of_the_renamed_options_are_one_message():
    result = invoke("status", "-c", "", "--remote")
    assert result.exit_code == 2 and "is empty" in result.output and "Traceback" not in result.output
    result = invoke("run", "-c", "lumi", "--", "true")  # -c is run's --cpus now: a cluster name there is a usage error
    assert result.exit_code == 2 and "'lumi' is not a valid integer range" in result.output
