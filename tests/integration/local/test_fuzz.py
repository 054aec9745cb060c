"""Property-based: malformed and hostile profiles, params and paths fed to the render
and run paths (over 1,000 cases in all). Every case ends either in a clear rejection
(an OrchestratorError: a message, no traceback) or in a script that hands each value
to the program unchanged; no injected command ever runs (a canary file).

Rendered scripts run with srun, apptainer, singularity, scontrol and python replaced
by recorders on PATH (support.install_recorders), inside a sandbox folder: the fuzzed
paths a script creates (fast storage, per-node folders) are kept under it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import ACCOUNT, HOSTILE_DVC_YAML, ROOT, calls, install_recorders, invoke, make_project
from support import examples as scaled

from orchestrator.config import profile
from orchestrator.config.params import Settings
from orchestrator.errors import OrchestratorError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import render
from orchestrator.scripts.plan import make_plan

SANDBOX = Path(tempfile.mkdtemp(prefix="orch-fuzz-"))
CANARY = SANDBOX / "CANARY"
BIN, RECORDS = SANDBOX / "bin", SANDBOX / "records"

# Each runs `touch CANARY` if any layer evaluates it as shell.
PAYLOADS = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY}",
    f"' ; touch {CANARY} ; '",
    f'" ; touch {CANARY} ; "',
    f"\ntouch {CANARY}\n",
    f"${{IFS}}; touch {CANARY} #",
    f"&& touch {CANARY}",
    f"| touch {CANARY}",
    f"$'\\n'touch {CANARY}",
    f"${{X:-$(touch {CANARY})}}",
]
ALPHABET = "ab-_./ ;|&$`'\"\\\n\t(){}[]<>*?~#!%=,:@^"
hostile = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(ALPHABET, max_size=16),
    st.builds(lambda a, p, b: a + p + b, st.text(ALPHABET, max_size=6), st.sampled_from(PAYLOADS), st.text(ALPHABET, max_size=6)),
)
malformed = st.one_of(
    hostile,
    st.integers(-(10**12), 10**12),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(hostile, max_size=3),
    st.dictionaries(st.text(ALPHABET, max_size=8), hostile, max_size=2),
)
# Workspaces (and so DVC_ROOT, binds, staging sources) under hostile names.
WORKSPACES = [SANDBOX / "ws plain", SANDBOX / "ws 'q' $(touch CANARY) `x` ; & |", SANDBOX / 'ws\nnewline "dq" \\ $HOME']


def fuzz(examples: int) -> settings:
    checks = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
    return settings(max_examples=scaled(examples), deadline=None, suppress_health_check=checks)


# The container runtime, recording: skip `exec` and the options (those of a rendered
# script: a flag alone, or --bind/--pwd with a value), then the image; run the rest.
CONTAINER_RECORDER = """#!/bin/bash
n=$(ls "$RECORD_DIR" | wc -l)
printf '%s\\0' "$0" "$@" > "$RECORD_DIR/$n.container.argv"
shift
while [[ "$1" == --* ]]; do
  case "$1" in --bind|--pwd) shift 2 ;; *) shift ;; esac
done
shift
exec "$@"
"""


def setup_module() -> None:
    install_recorders(BIN)
    for runtime in ("apptainer", "singularity"):
        (BIN / runtime).write_text(CONTAINER_RECORDER)
    RECORDS.mkdir()
    for ws in WORKSPACES:
        ws.mkdir()
        (ws / "data").mkdir()
        (ws / "data" / "x").write_text("input")


def teardown_module() -> None:
    subprocess.run(["rm", "-rf", "--", str(SANDBOX)], check=False)


def sandboxed(name: str) -> dict:
    """A built-in profile whose folders (fast storage, per-node dirs) lie in the sandbox."""
    data = yaml.safe_load((ROOT / f"orchestrator/config/profiles/{name}.yaml").read_text())
    data.setdefault("storage", {})["workdir_root"] = f"{SANDBOX}/fast"
    env = data.setdefault("environment", {})
    for key in env.get("node_local_dirs", []):
        env["variables"][key] = f"{SANDBOX}/node-${{SLURM_NODEID}}/{key}"
    return data


BASES = {"testbed": sandboxed("testbed"), "lumi": sandboxed("lumi")}
# Where a fuzzed value goes, and whether it must stay a path inside the sandbox (a
# script creates it) or may be anything. Not container.setup: those lines are shell
# code by design (a profile's own commands, such as LUMI's `$WITH_CONDA`).
TARGETS = [
    (("name",), "any"),
    (("description",), "any"),
    (("scheduler", "default_partition"), "any"),
    (("scheduler", "account_pattern"), "any"),
    (("scheduler", "requeue_signal"), "any"),
    (("scheduler", "max_requeues"), "any"),
    (("scheduler", "cluster_name"), "any"),
    (("scheduler", "partitions", "extra"), "any"),
    (("node", "cores"), "any"),
    (("node", "gpus"), "any"),
    (("node", "gpu_cores"), "any"),
    (("node", "reserved_cores"), "any"),
    (("node", "cpu_masks"), "any"),
    (("container", "image"), "any"),
    (("container", "runtime"), "any"),
    (("container", "gpu_flag"), "any"),
    (("container", "binds"), "any"),
    (("environment", "variables", "FUZZ_VAR"), "any"),
    (("environment", "unset"), "any"),
    (("environment", "master_addr_suffix"), "any"),
    (("storage", "workdir_root"), "path"),
    (("environment", "node_local_dirs"), "any"),
    (("unknown_key",), "any"),
]


def _set(data: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def run_script(text: str) -> subprocess.CompletedProcess:
    script = SANDBOX / "job.sh"
    script.write_text(text)
    env = {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RECORD_DIR": str(RECORDS),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "1",
        "HOME": str(SANDBOX / "home"),
        "USER": "fuzz",
    }
    return subprocess.run(["bash", str(script)], cwd=SANDBOX, env=env, capture_output=True, text=True, timeout=60)


def expect_clean_rejection(exc: OrchestratorError) -> None:
    assert exc.headline and isinstance(exc.headline, str)
    assert all(isinstance(p, str) and p for p in exc.problems)


def assert_no_canary() -> None:
    assert not CANARY.exists(), "an injected command was executed"


@fuzz(600)
@given(
    base=st.sampled_from(sorted(BASES)),
    target=st.sampled_from(TARGETS),
    value=st.one_of(hostile, st.lists(hostile, max_size=3), malformed),
    path_value=hostile,
    args=st.lists(hostile, max_size=4),
    bind=hostile,
    io=st.lists(hostile, max_size=3),
    workspace=st.sampled_from(WORKSPACES),
    form=st.sampled_from(["sbatch", "srun"]),
)
def test_fuzzed_profiles_and_paths_render_safely_or_are_rejected(base, target, value, path_value, args, bind, io, workspace, form):
    CANARY.unlink(missing_ok=True)  # each example is judged on its own (and shrinks right)
    data = copy.deepcopy(BASES[base])
    path, kind = target
    _set(data, path, f"{SANDBOX}/{path_value}" if kind == "path" else value)
    file = SANDBOX / "fuzzed.yaml"
    file.write_text(yaml.safe_dump(data))
    try:
        loaded = profile.load(str(file))
    except OrchestratorError as exc:
        event("profile rejected")
        expect_clean_rejection(exc)
        return
    command = ("python", "-m", "experiments.classify", *args)
    spec = JobSpec(command=command, nodes=1, gpus_per_node=2, account=ACCOUNT, binds=(f"{SANDBOX}/{bind}",))
    rel = tuple(p.lstrip("/") or "x" for p in io)  # deps and outs are relative to the workspace
    plan = make_plan(
        spec, "stage@" + path_value, "", loaded, Settings(image="site"), str(workspace), form, inputs=("data", *rel), outputs=rel
    )
    if plan.problems:
        event("plan problems")
        assert all(isinstance(p, str) and p for p in plan.problems)
        return
    before = len(calls(RECORDS, "python"))
    done = run_script(render.render(plan))
    assert_no_canary()
    event(f"script ran, exit {done.returncode}")
    if done.returncode == 0:
        pythons = calls(RECORDS, "python")
        # The program got every argument exactly as planned.
        assert len(pythons) == before + 1 and tuple(pythons[-1]) == command[1:], done.stderr


PARAMS_KEYS = ["cluster", "account", "image", "partition", "time", "unknown"]


@pytest.fixture(scope="module")
def dvc_projects():
    """A DVC project in each hostile workspace, with hostile values interpolated into its cmd."""
    found = []
    for i, ws in enumerate(WORKSPACES):
        found.append(make_project(ws / f"project{i}", dvc_yaml=HOSTILE_DVC_YAML, params_yaml="{}\n"))
    return found


@fuzz(300)
@given(
    which=st.integers(0, len(WORKSPACES) - 1),
    mode=st.sampled_from(["values"] * 3 + ["unquotable"] * 2 + ["settings"] * 3 + ["raw"] * 2),
    key=st.sampled_from(PARAMS_KEYS),
    value=malformed,
    datasets=st.lists(hostile, min_size=1, max_size=2),
    notes=st.lists(hostile, min_size=1, max_size=2),
    raw=st.text(ALPHABET, max_size=40),
)
def test_fuzzed_params_through_the_render_command(dvc_projects, which, mode, key, value, datasets, notes, raw):
    """Hostile values interpolated into the stage cmd ("values": each within what its
    quotes in dvc.yaml can carry; "unquotable": anything), malformed settings
    ("settings"), or params.yaml that is not YAML at all ("raw")."""
    CANARY.unlink(missing_ok=True)
    project = dvc_projects[which]
    settings_ = {"cluster": "testbed", "account": ACCOUNT, **({key: value} if mode == "settings" else {})}
    if mode != "unquotable":
        # The cmd single-quotes datasets and double-quotes notes: DVC's shell would
        # read a quote (or $, `, \ in double quotes) as syntax, so such values are
        # rejected as shell syntax; "unquotable" checks that.
        # DVC itself reads a backslash before ${ as an escape, so none in these.
        datasets = [d.replace("'", "").replace("\\", "") for d in datasets]
        notes = ["".join(c for c in n if c not in '"$`\\') for n in notes]
    params = {"orchestrator": settings_, "datasets": datasets, "notes": notes}
    (project / "params.yaml").write_text(raw if mode == "raw" else yaml.safe_dump(params))
    out = SANDBOX / "rendered"
    subprocess.run(["rm", "-rf", "--", str(out)], check=True)
    result = invoke("render", "--check", "--no-shellcheck", "--out", str(out), "--project", str(project))
    # A user error exits 1 or 2 with a message; anything else is a bug (a traceback).
    event(f"{mode}: render exit {result.exit_code}")
    assert result.exit_code in (0, 1, 2), result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    if result.exit_code != 0:
        assert "error:" in result.output
        assert not out.exists() or not any(out.iterdir())  # nothing half-written
    else:
        before = len(calls(RECORDS, "python"))
        for script in sorted(out.iterdir()):
            assert run_script(script.read_text()).returncode == 0
        if mode != "unquotable":
            # Each item's values reached the program as params.yaml holds them.
            seen = {(a[a.index("--dataset") + 1], a[a.index("--note") + 1]) for a in calls(RECORDS, "python")[before:]}
            assert seen == {(d, n) for d in datasets for n in notes}
    assert_no_canary()


@contextlib.contextmanager
def in_workspace(workspace: Path):
    """cwd and environment of a hand-run `orchestrator run` (recorders first on PATH)."""
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.chdir(workspace)
    os.environ.update(PATH=f"{BIN}:{old_env['PATH']}", RECORD_DIR=str(RECORDS), ORCH_POLL_FIRST_S="0.05", ORCH_POLL_MAX_S="0.2")
    for name in ("DVC_ROOT", "DVC_STAGE"):
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)


@fuzz(150)
@given(args=st.lists(hostile, min_size=1, max_size=3), name=hostile, bind=hostile, workspace=st.sampled_from(WORKSPACES))
def test_fuzzed_arguments_through_the_run_command(args, name, bind, workspace):
    """`orchestrator run` by hand on the local profile: the job really runs (python is the recorder)."""
    CANARY.unlink(missing_ok=True)
    before = len(calls(RECORDS, "python"))
    with in_workspace(workspace):
        result = invoke("run", "--cluster", "local", "--name", name, "--bind", bind, "--", "python", "-c", "pass", *args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    assert_no_canary()
    event(f"run exit {result.exit_code}")
    new = calls(RECORDS, "python")[before:]
    if result.exit_code == 0:
        # Ran, with every argument as given; or attached to the same job run before.
        assert new == [["-c", "pass", *args]] or (new == [] and "attached" in result.output), result.output
    else:
        assert result.output.startswith("error: ") and new == [], result.output
