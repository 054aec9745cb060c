"""Issue 34's adoption path from a user's side, on this machine: the orchestrator's wheel installed
in a clean venv (its dependencies the machine's own, --system-site-packages, as on a login node that
already has DVC), a DVC project that is not this repository, and the README's steps: `orchestrator
init --wrap-all`, `orchestrator render --check`, `dvc repro`, `dvc metrics show`. The time the
tool's steps took is printed (not held to a bound here: a benchmark's job)."""

from __future__ import annotations

import functools
import json
import os
import time

import pytest
from support import GIT_ENV, require, run_in

from orchestrator import __version__

pytestmark = pytest.mark.slow

TRAIN = """\
import json, yaml
lr = yaml.safe_load(open("params.yaml"))["train"]["lr"]
json.dump({"score": 2 * lr}, open("metrics.json", "w"))
open("model.txt", "w").write(f"lr={lr}\\n")
"""
DVC_YAML = """\
stages:
  train:
    cmd: python3 train.py
    deps: [train.py]
    params: [train]
    outs: [model.txt]
    metrics:
      - metrics.json:
          cache: false
"""


def test_a_fresh_project_adopts_the_installed_wheel_as_the_readme_says(tmp_path, wheel_venv):
    require("shellcheck")  # render --check runs it on every script
    venv, project = wheel_venv, tmp_path / "my-project"
    env = {**os.environ, **GIT_ENV, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    which = "import orchestrator; print(orchestrator.__file__, orchestrator.__version__)"
    where = run_in(tmp_path, venv / "bin/python", "-c", which, env=env)
    assert str(venv) in where and __version__ in where, where  # the wheel's copy, not this checkout

    project.mkdir()
    run = functools.partial(run_in, project, env=env, timeout=600)  # a limit for a hang only
    (project / "train.py").write_text(TRAIN)
    (project / "dvc.yaml").write_text(DVC_YAML)
    (project / "params.yaml").write_text("train:\n  lr: 0.25\n")
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "mine"]):
        run(*argv)

    started = time.monotonic()
    init = run("orchestrator", "init", "--wrap-all")
    assert "train" in init
    assert "orchestrator run -- python3 train.py" in (project / "dvc.yaml").read_text()
    rendered = run("orchestrator", "render", "--check")
    assert "1 script(s) for local and checked" in rendered, rendered
    run("dvc", "repro")
    shown = run("dvc", "metrics", "show", "--json")
    took = time.monotonic() - started
    print(f"init, render --check, dvc repro and dvc metrics show: {took:.1f} s")

    assert json.loads((project / "metrics.json").read_text()) == {"score": 0.5}
    assert "0.5" in shown
    # Declared by --wrap-all beside the metrics (cache: false, as the metrics): committed with them, never a stray file.
    assert (project / "provenance.json").is_file() and "provenance.json" in (project / "dvc.yaml").read_text()
    assert run("dvc", "status").strip() in ("", "Data and pipelines are up to date.")
