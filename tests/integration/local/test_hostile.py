"""Hostile values in params and paths: rendered scripts pass bash -n and shellcheck,
and running them (srun, apptainer, scontrol and python replaced by recorders on
PATH: support.install_recorders) hands every value to the program unchanged and
never executes any of it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml
from support import HOSTILE_DVC_YAML, ROOT, calls, install_recorders, make_project, require, run_orchestrator

CANARY = "CANARY"
# Each would run `touch CANARY` if any layer evaluated it.
NO_SINGLE_QUOTE = [
    "a b",
    "x; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    'say "hi" && touch CANARY',
    "back\\slash | touch CANARY",
]
WITH_SINGLE_QUOTE = ["it's", "won't; touch CANARY || true"]
PROJECT_DIR = "proj 'q' ; $(touch CANARY) `touch CANARY` & |\nnext line"


def container_profile(tmp: Path) -> Path:
    """lumi, with its per-node folders moved under ``tmp`` so running scripts stays inside it."""
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/lumi.yaml").read_text())
    data["name"] = "lumi-local"
    data["storage"]["workdir_root"] = "${ORCH_TEST_ROOT}/flash"
    for key in data["environment"]["node_local_dirs"]:
        data["environment"]["variables"][key] = "${ORCH_TEST_ROOT}/miopen-${SLURM_NODEID}"
    path = tmp / "lumi-local.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_hostile_values_are_rendered_safely_and_never_executed(tmp_path):
    require("shellcheck")
    params = {
        "orchestrator": {"cluster": "testbed", "account": "project_465000858", "image": "site"},
        "datasets": NO_SINGLE_QUOTE,
        "notes": WITH_SINGLE_QUOTE,
    }
    project = make_project(tmp_path / PROJECT_DIR, dvc_yaml=HOSTILE_DVC_YAML, params_yaml=yaml.safe_dump(params))
    profile_file = container_profile(tmp_path)
    bin_dir, record_dir = tmp_path / "bin", tmp_path / "records"
    install_recorders(bin_dir)
    record_dir.mkdir()
    # SLURM_JOB_ID: what sbatch gives a batch script (here run by hand).
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RECORD_DIR": str(record_dir),
        "ORCH_TEST_ROOT": str(tmp_path / "node"),
        "SLURM_JOB_ID": "42",
    }

    # Earlier outputs (a requeued run's checkpoint): staging copies them to the fast
    # working dir and back, under their hostile names.
    for dataset in NO_SINGLE_QUOTE:
        (project / "results" / dataset).mkdir(parents=True)
        (project / "results" / dataset / "state").write_text(dataset)

    for cluster, form in [("testbed", "sbatch"), ("testbed", "srun"), (str(profile_file), "sbatch")]:
        out = tmp_path / f"scripts-{Path(cluster).stem}-{form}"
        done = run_orchestrator("render", "--check", "--cluster", cluster, "--form", form, "--out", str(out), cwd=project)
        assert done.returncode == 0, done.stderr
        scripts = sorted(out.iterdir())
        assert len(scripts) == len(NO_SINGLE_QUOTE) * len(WITH_SINGLE_QUOTE)
        for script in scripts:
            ran = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert ran.returncode == 0, (script.name, ran.stderr)

    # Every value reached the program exactly as written in params.yaml ...
    pythons = calls(record_dir, "python")
    assert len(pythons) == 3 * len(NO_SINGLE_QUOTE) * len(WITH_SINGLE_QUOTE)
    seen = {(argv[argv.index("--dataset") + 1], argv[argv.index("--note") + 1]) for argv in pythons}
    assert seen == {(d, n) for d in NO_SINGLE_QUOTE for n in WITH_SINGLE_QUOTE}
    assert all(argv[argv.index("--output") + 1] == f"results/{argv[argv.index('--dataset') + 1]}" for argv in pythons)
    # ... through the container runtime with the hostile workspace bound as it is ...
    containers = calls(record_dir, "singularity")
    assert len(containers) == len(NO_SINGLE_QUOTE) * len(WITH_SINGLE_QUOTE)
    workspace = str(project.resolve())
    assert all(["--bind", workspace] == argv[argv.index(workspace) - 1 : argv.index(workspace) + 1] for argv in containers)
    # ... the outputs came back from the staged copy unchanged ...
    assert sorted(p.name for p in (project / "results").iterdir()) == sorted(NO_SINGLE_QUOTE)
    assert all((project / "results" / d / "state").read_text() == d for d in NO_SINGLE_QUOTE)
    assert any("ORCH_STAGE" in s.read_text() for s in (tmp_path / "scripts-lumi-local-sbatch").iterdir())
    # ... and nothing anywhere ran the injected text.
    assert not list(tmp_path.rglob(CANARY)), "an injected command was executed"
    assert not Path(CANARY).exists() and not (ROOT / CANARY).exists()


def test_values_that_cannot_be_quoted_in_dvc_yaml_are_rejected(tmp_path):
    params = {"orchestrator": {"cluster": "testbed", "account": "project_465000858"}, "datasets": ["it's; touch CANARY"], "notes": ["x"]}
    project = make_project(tmp_path / "p", dvc_yaml=HOSTILE_DVC_YAML, params_yaml=yaml.safe_dump(params))
    done = run_orchestrator("render", cwd=project)
    assert done.returncode == 2
    assert "its cmd has shell syntax" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.rglob(CANARY))


def test_values_with_a_line_break_are_rejected_before_dvc_splits_the_cmd(tmp_path):
    """DVC runs each line of a stage's cmd as its own command: a value with a line break
    would reach bash cut in two (seen: "unexpected EOF while looking for matching `"'")."""
    params = {
        "orchestrator": {"cluster": "testbed", "account": "project_465000858"},
        "datasets": ["line1\nline2 ; touch CANARY"],
        "notes": ["x"],
    }
    project = make_project(tmp_path / "p", dvc_yaml=HOSTILE_DVC_YAML, params_yaml=yaml.safe_dump(params))
    done = run_orchestrator("render", cwd=project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "its cmd has a line break" in done.stderr and "hostile@line1\\nline2" in done.stderr
    assert not (project / ".orchestrator/scripts").exists() and not list(tmp_path.rglob(CANARY))


def test_srun_recorder_saw_the_profile_binding(tmp_path):
    """The recorders are real enough to see what srun is asked for."""
    project = make_project(tmp_path / "p")
    bin_dir, record_dir = tmp_path / "bin", tmp_path / "records"
    install_recorders(bin_dir)
    record_dir.mkdir()
    out = tmp_path / "out"
    done = run_orchestrator("render", "--cluster", "testbed", "--form", "srun", "--out", str(out), "benchmark@*cfg1", cwd=project)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_DIR": str(record_dir)}
    (script,) = out.iterdir()
    ran = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    (srun,) = calls(record_dir, "srun")
    assert "--cpu-bind=mask_cpu:0x1,0x2" in srun and "--nodes=2" in srun and "--account=project_465000858" in srun
    (python,) = calls(record_dir, "python")
    assert python[:2] == ["-m", "experiments.classify"] and json.dumps(python)
