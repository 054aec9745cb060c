"""One grammar across the CLI (issue 36): walked over the click tree, so a new command cannot drift.
Every command that can run on the login node (`--remote`) takes `--cluster`, which names that node,
as `submit --remote --cluster lumi` does: `status --remote` after it must reach the same place."""

from __future__ import annotations

import click
import pytest
from support import invoke

from orchestrator.cli import main


def commands(group: click.Group = main, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
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
