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


@pytest.mark.parametrize("argv", [["status"], ["logs", "item"], ["show", "item"], ["cancel"], ["record"]])
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
    assert {s: shorts(run).get(s) for s in SLURM_SHORTS} == SLURM_SHORTS
    # Slurm has no short form of --gpus-per-node: -G is its --gpus, the GPUs of the whole job.
    assert "--gpus-per-node" not in shorts(run).values() and "--gpus" in longs(run)


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


def test_sweep_remote_runs_the_sweep_on_the_login_node_of_the_cluster_given(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    got: dict = {}
    record = lambda project, cluster, forwarded, **kw: got.update(cluster=cluster, argv=forwarded, **kw)  # noqa: E731
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", record)
    result = invoke("sweep", "--remote", "--cluster", "lumi", "-S", "lr=0.1,0.2", "-n", "grid", "train")
    assert result.exit_code == 0, result.output
    assert got == {
        "cluster": "lumi",
        "argv": ["sweep", "--cluster=lumi", "--set-param=lr=0.1,0.2", "--name=grid", "--", "train"],
        "sync": True,
        "with_changes": False,
    }


def test_sweep_with_changes_needs_remote(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("sweep", "--with-changes", "-S", "lr=0.1")
    assert result.exit_code == 2 and "--with-changes goes with --remote" in result.output and "Traceback" not in result.output


# Slurm's short flags (sbatch/srun), which `run` mirrors: no command may give them another meaning.
SLURM_SHORTS = {
    "-c": "--cpus",
    "-N": "--nodes",
    "-G": "-G",  # Slurm's --gpus; an option of its own for a release (runargs: it meant per node before)
    "-t": "--time",
    "-p": "--partition",
    "-A": "--account",
    "-q": "--qos",
    "-C": "--constraint",
}


def test_no_short_flag_contradicts_slurms_habits():
    wrong = [(name, s, long) for name, c in commands() for s, long in shorts(c).items() if s in SLURM_SHORTS and long != SLURM_SHORTS[s]]
    assert wrong == []


def longs(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) and not p.hidden for o in p.opts if o.startswith("--")}


def test_one_name_for_where_output_goes():
    """`-o/--out` as DVC has it (`dvc stage add -o`), never --output, --output-dir or --out-dir."""
    other = {"--output", "--output-dir", "--out-dir", "--outdir", "--dest"}
    wrong = [(name, o) for name, c in commands() for o in longs(c) & other]
    assert wrong == []
    with_out = [name for name, c in commands() if "--out" in longs(c)]
    assert with_out and all(shorts(c).get("-o") == "--out" for name, c in commands() if name in with_out)


def test_one_name_for_machine_output():
    """`--json` where the choice is a table or JSON (as `dvc exp show --json`); --format only with more forms than those."""
    wrong = []
    for name, command in commands():
        for p in command.params:
            if isinstance(p, click.Option) and not p.hidden and "--format" in p.opts:
                assert isinstance(p.type, click.Choice), name
                if set(p.type.choices) <= {"table", "json", "text"}:
                    wrong.append(name)
    assert wrong == []


def test_defaults_are_stated_one_way():
    """click's show_default, never a hand-written "(default: x)" or "[default: x]" in an option's help."""
    wrong = []
    for name, command in commands():
        for p in command.params:
            if isinstance(p, click.Option) and not p.hidden and "default:" in (p.help or "").lower():
                wrong.append(f"{name} {p.opts[0]}")
    assert wrong == []


# Each old spelling, kept a release: (argv, what it says, where the command is stopped to see what it got).
OLD = [
    (["container", "list", "--format", "json"], "--format is now --json"),
    (["container", "build", "--output", "x.sif", "--on-cluster"], "--output is now --out (-o)"),
    (["status", "-c", "lumi", "--remote"], "-c is now --cluster"),
    (["submit", "-f", "--remote"], "-f is now --force"),
    (
        ["plan", "--parameters", "1B", "--gpus", "8", "--gpus-per-node", "4", "--gpu-memory-gb", "40", "--top", "1"],
        "`plan` is now `layout`",
    ),
]


@pytest.mark.parametrize(("argv", "said"), OLD, ids=[" ".join(a[:2]) for a, _ in OLD])
def test_every_old_spelling_says_the_new_one_once(monkeypatch, tmp_path, argv, said):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", lambda *a, **kw: None)
    result = invoke(*argv)
    assert result.output.count(said) == 1, result.output
    assert "Traceback" not in result.output


def test_old_spellings_act_as_the_new_ones(monkeypatch, tmp_path):
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / "images.yaml").write_text("images: {}\n")
    old = invoke("container", "list", "--project", str(tmp_path), "--format", "json")
    assert old.exit_code == 0 and old.output.split("\n", 1)[1] == invoke("container", "list", "--project", str(tmp_path), "--json").output
    table = invoke("container", "list", "--project", str(tmp_path), "--format", "table")
    assert not table.output.split("\n", 1)[1].lstrip().startswith("[")
    args = ["--parameters", "1B", "--gpus", "8", "--gpus-per-node", "4", "--gpu-memory-gb", "40", "--top", "1", "--format", "json"]
    assert invoke("plan", *args).output.split("\n", 1)[1] == invoke("layout", *args).output
    refused = invoke("container", "build", "--output", "x.sif", "--on-cluster", "--project", str(tmp_path))
    assert refused.exit_code == 2 and "leave out --out" in refused.output


@pytest.mark.parametrize(
    "argv",
    [
        ["container", "list", "--format", "xml"],
        ["container", "build", "--output"],
        ["container", "build", "-o"],
        ["plan", "--gpus", "zero"],
        ["layout", "--gpus", "zero"],
        ["render", "-o"],
        ["report", "--out"],
        ["sweep", "--remote", "--cluster", ""],
    ],
)
def test_bad_input_to_renamed_options_and_aliases_is_one_message_and_exit_2(monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    result = invoke(*argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert sum(line.startswith(("Error:", "error:")) for line in result.output.splitlines()) == 1, result.output


def test_help_groups_the_commands_by_workflow_with_whole_summaries():
    from orchestrator.cli import COMMANDS, DOCS, SECTIONS

    shown = invoke("--help").output
    assert [t for t in SECTIONS if f"\n{t}:\n" in shown] == list(SECTIONS)
    assert list(SECTIONS)[-1] == "Development" and SECTIONS["Development"] == ("testbed",)
    assert sorted(n for names in SECTIONS.values() for n in names) == sorted(COMMANDS)
    assert "..." not in shown.split("Set up:")[-1] and " ".join(DOCS.split()) in " ".join(shown.split())
    flat = " ".join(shown.split())
    assert [name for name, (_, summary) in COMMANDS.items() if summary not in flat] == []


def test_each_listed_summary_is_the_commands_own():
    from orchestrator.cli import COMMANDS

    ctx = click.Context(main)
    assert {name: main.get_command(ctx, name).get_short_help_str(1000) for name in COMMANDS} == {n: s for n, (_, s) in COMMANDS.items()}


def test_help_imports_no_command_module():
    import subprocess
    import sys

    code = (
        "import sys; from orchestrator.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('orchestrator.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("group", ["clusters", "container", "exp", "remote", "testbed"])
def test_every_group_gives_whole_summaries(group):
    shown = invoke(group, "--help").output
    listed = shown.split("Commands:")[1]
    assert "..." not in listed.replace("COMMAND...", ""), listed


@pytest.mark.parametrize("remote", [[], ["--remote"]])
def test_an_empty_sweep_name_is_refused_not_made_a_default(monkeypatch, tmp_path, remote):
    monkeypatch.chdir(tmp_path)
    reached: list = []
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", lambda *a, **kw: reached.append(a))
    result = invoke("sweep", "-S", "lr=1,2", "--name", "", *remote)
    assert result.exit_code == 2 and "sweep name ''" in result.output and reached == [], result.output
