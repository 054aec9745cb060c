"""Property-based: arbitrary text a user can type, fed to the command line.

Item values and names, stage names, paths (--project, --out, --cluster), time limits
and environment variables get text of any kind: control characters, non-ASCII,
thousands of characters, path separators, pseudo file systems (NUL cannot be in
argv or the environment, so none). Every call must end with exit status 0, or 2 and
a message; never a traceback (an uncaught exception is exit 1 in click's runner).
It must write nothing outside the project's own folders: the sandbox the project
lies in is compared before and after each call, where only the project's
``.orchestrator/`` (scripts, ledger, logs), DVC's ``.dvc/tmp`` and the ``--out``
folder may change, and a call that fails leaves no ``--out`` folder behind.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st
from support import ACCOUNT, make_project
from support import examples as scaled

from orchestrator.util.files import chdir

SANDBOX = Path(tempfile.mkdtemp(prefix="orch-inputs-"))
PROJECT = SANDBOX / "project"
OUTS = SANDBOX / "outs"
A_FILE = SANDBOX / "other" / "a-file"  # a path through it goes through a regular file

DVC_YAML = """\
stages:
  train:
    matrix:
      v: ${values}
    cmd: orchestrator run --time ${time} -- python -c pass '${item.v}'
"""

# Text of every kind except NUL (and lone surrogates, which no argv holds as text).
CHARS = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
TRICKY = "/.\\ -_:@=,+%\n\t\r\x1b\x7f\x01$'\"`;|&*?~#!()[]{}<>é日🙂\u202e\u00a0"
text = st.one_of(
    st.text(CHARS, max_size=24),
    st.text(st.sampled_from(TRICKY), min_size=1, max_size=24),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "日", "/", "a/", "../", "\n"]), st.integers(100, 5000)),
    st.sampled_from(["", " ", ".", "..", "-", "--help", "~", "$HOME", "a\nb", "1-24", "25:99:99", "UNLIMITED", "٣"]),
)
good_times = st.sampled_from(["90", "00:30:00", "1-00:00:00", "2-00", "10:00", "0:59:59"])
times_ = st.one_of(
    text,
    st.from_regex(r"[0-9]{1,3}(-[0-9]{1,3})?(:[0-9]{1,3}){0,2}", fullmatch=True),
    st.sampled_from(["0", "INFINITE", "unlimited", "1-24", "99:99", "1:60:00"]),
    good_times,
)
# Pseudo file systems and paths through a regular file, next to arbitrary names under the sandbox.
ELSEWHERE = ["/proc/self", "/proc/self/fd", "/sys/kernel", "/dev/null", str(A_FILE), f"{A_FILE}/sub"]
ENV_VARS = ["ORCH_POLL_FIRST_S", "ORCH_POLL_MAX_S", "ORCH_FORCE", "ORCH_ATTACH_ONLY"]
# No Slurm is ever asked (a testbed may be up on this machine): params.yaml names the
# local profile, `run` gets --cluster=local, and Slurm's commands on PATH fail at once.
SLURM_COMMANDS = ("scontrol", "sbatch", "srun", "sacct", "squeue", "scancel", "sinfo")
FAKE_BIN = SANDBOX / "bin"
# The polling a run gets unless a case sets its own: a local job is seen at once.
QUICK = {"ORCH_POLL_FIRST_S": "0.05", "ORCH_POLL_MAX_S": "0.2", "PATH": f"{FAKE_BIN}:{os.environ['PATH']}"}


def fuzz(examples: int) -> settings:
    return settings(max_examples=scaled(examples), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def setup_module() -> None:
    params = {"orchestrator": {"cluster": "local", "account": ACCOUNT, "image": "none"}, "values": ["x"], "time": "10"}
    make_project(PROJECT, dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(params))
    OUTS.mkdir()
    FAKE_BIN.mkdir()
    for name in SLURM_COMMANDS:
        (FAKE_BIN / name).write_text(f"#!/bin/sh\necho '{name}: no Slurm in this test' >&2\nexit 1\n")
        (FAKE_BIN / name).chmod(0o755)
    A_FILE.parent.mkdir()
    A_FILE.write_text("a regular file\n")


def teardown_module() -> None:
    subprocess.run(["rm", "-rf", "--", str(SANDBOX)], check=False)


def under(base: Path, name: str) -> Path:
    """``base/name``, kept inside ``base`` (an absolute or ..-climbing name would leave it)."""
    path = Path(os.path.normpath(os.path.join(base, name.lstrip("/"))))
    assume(path != base and base in path.parents)
    return path


def snapshot() -> dict[str, tuple]:
    """Everything under the sandbox: folders by name, files by size and modification time.
    Walked with a stack of its own: os.walk recurses once per level (Python 3.11), and an --out
    may be thousands of folders deep."""
    found: dict[str, tuple] = {}
    folders = [str(SANDBOX)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir():
                    found[entry.path] = ("dir",)
                    if not entry.is_symlink():
                        folders.append(entry.path)
                else:
                    st_ = entry.stat(follow_symlinks=False)
                    found[entry.path] = ("file", st_.st_size, st_.st_mtime_ns)
    return found


ALLOWED = [PROJECT / ".orchestrator", PROJECT / ".dvc" / "tmp"]


def changed(before: dict, after: dict, out: Path | None) -> list[str]:
    """What changed outside the project's own folders, ``out`` and the folders made on the way to it."""
    # As text: a path thousands of folders deep has thousands of parents to compare.
    allowed = [str(a) for a in (*ALLOWED, *([out] if out else []))]
    on_the_way = {str(p) for p in out.parents} if out else set()
    paths = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return sorted(
        p
        for p in paths
        if not any(p == a or p.startswith(a + os.sep) for a in allowed) and not (p in on_the_way and after.get(p) == ("dir",))
    )


def empty_outs() -> None:
    for entry in OUTS.iterdir():
        subprocess.run(["rm", "-rf", "--", str(entry)], check=True)


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path = SANDBOX, out: Path | None = None):
    """`orchestrator ARGS` in this process; checks the outcome's form and that nothing outside the
    project's own folders (and ``out``) changed. Returns click's result."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    env = {**QUICK, **(env or {})}
    before = snapshot()
    with chdir(cwd):
        result = CliRunner().invoke(main, list(args), env=env)
    after = snapshot()
    event(f"{args[0]}: exit {result.exit_code}")
    if result.exit_code:
        event(f"{args[0]}: {result.output.strip().splitlines()[0][:50] if result.output.strip() else '(no output)'}")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"`orchestrator {' '.join(map(repr, args))}` raised, output:\n{result.output}") from result.exception
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert result.output.strip(), "exit 2 without a message"
        if out is not None:
            assert not os.path.exists(out) or (os.path.isdir(out) and not os.listdir(out)), f"{out} half-written"
    assert changed(before, after, out) == [], result.output
    return result


def write_params(**values) -> None:
    params = {"orchestrator": {"cluster": "local", "account": ACCOUNT, "image": "none"}, "values": ["x"], "time": "10", **values}
    (PROJECT / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))


@fuzz(50)
@given(
    values=st.lists(text, min_size=1, max_size=3), time=st.one_of(good_times, times_), settings_time=st.one_of(st.none(), st.none(), times_)
)
def test_matrix_values_and_time_limits_through_render(values, time, settings_time):
    """Item values (so item names and file names) and time limits, from params.yaml."""
    # An empty value is DVC's own assertion today (tests/unit/cli/test_input_errors.py has the
    # case, failing until stages.py refuses it); left out here so the rest is explored.
    assume(all(values))
    write_params(values=values, time=time)
    if settings_time is not None:
        params = yaml.safe_load((PROJECT / "params.yaml").read_text())
        params["orchestrator"]["time"] = settings_time
        (PROJECT / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    empty_outs()
    for cluster in ("local", "testbed"):
        cli("render", f"--project={PROJECT}", f"--cluster={cluster}", f"--out={OUTS / cluster}", out=OUTS / cluster)


@fuzz(40)
@given(stage=text)
def test_stage_names_through_render(stage):
    (PROJECT / "dvc.yaml").write_text(yaml.safe_dump({"stages": {stage: yaml.safe_load(DVC_YAML)["stages"]["train"]}}, allow_unicode=True))
    write_params()
    try:
        cli("render", f"--project={PROJECT}")
    finally:
        (PROJECT / "dvc.yaml").write_text(DVC_YAML)


@fuzz(60)
@given(
    kind=st.sampled_from(["under", "elsewhere"]),
    name=text,
    elsewhere=st.sampled_from(ELSEWHERE),
    command=st.sampled_from(["render", "status", "show", "logs", "cancel", "submit"]),
)
def test_project_paths(kind, name, elsewhere, command):
    write_params()
    project = under(SANDBOX / "p", name) if kind == "under" else Path(elsewhere)
    item = ["train@x"] if command in ("show", "logs") else []
    cli(command, *item, f"--project={project}")


@fuzz(60)
@given(kind=st.sampled_from(["under", "elsewhere"]), name=text, elsewhere=st.sampled_from(ELSEWHERE))
@example(kind="under", name="a/" * 1996, elsewhere=ELSEWHERE[0])  # ~2,000 folders deep (pathlib's mkdir recursed per level)
def test_out_paths(kind, name, elsewhere):
    write_params()
    out = under(OUTS, name) if kind == "under" else Path(elsewhere) / "scripts"
    empty_outs()
    cli("render", f"--project={PROJECT}", f"--out={out}", out=out if kind == "under" else None)


@fuzz(60)
@given(kind=st.sampled_from(["name", "under", "elsewhere"]), name=text, elsewhere=st.sampled_from(ELSEWHERE))
def test_cluster_values(kind, name, elsewhere):
    """--cluster: a built-in name that does not exist, a file or folder that does not, or is no profile."""
    write_params()
    cluster = name if kind == "name" else str(under(SANDBOX / "c", name)) if kind == "under" else elsewhere
    cli("render", f"--project={PROJECT}", f"--cluster={cluster}")


@fuzz(50)
@given(time=times_)
def test_time_limits_through_run(time):
    """`orchestrator run` by hand on the local profile: --time."""
    write_params()
    cli("run", "--cluster=local", f"--time={time}", "--name=adhoc", "--", "true", cwd=PROJECT)


@fuzz(50)
@given(name=text)
def test_item_names_through_run_show_and_logs(name):
    """`orchestrator run` by hand: --name is the item's name (its ledger, script and log file names)."""
    write_params()
    cli("run", "--cluster=local", f"--name={name}", "--", "true", cwd=PROJECT)
    cli("show", name, f"--project={PROJECT}")
    cli("logs", name, f"--project={PROJECT}")


@fuzz(60)
@given(variable=st.sampled_from(ENV_VARS), value=text, command=st.sampled_from(["run", "status", "render"]))
def test_environment_values(variable, value, command):
    write_params()
    if command == "run":
        # A valid polling interval is waited for: a long one would make the test slow, not wrong.
        assume(not (variable.startswith("ORCH_POLL") and _seconds(value) > 1))
        cli("run", "--cluster=local", "--name=env", "--", "true", env={variable: value}, cwd=PROJECT)
    else:
        cli(command, f"--project={PROJECT}", env={variable: value})


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0
