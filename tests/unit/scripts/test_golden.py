"""Golden scripts: one per cluster profile and script form, compared byte for byte.

A template or plan change that alters a script fails here. If the change is
intended, update the goldens and review their diff like code:

    python -m pytest tests/unit/scripts/test_golden.py --update-goldens
"""

import pytest
from support import ROOT, require

from orchestrator.config import params, profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import render
from orchestrator.scripts.plan import make_plan

GOLDEN = ROOT / "tests" / "golden"

ACCOUNTS = {
    "lumi": "project_465000858",
    "testbed": "project_465000858",
    "frontier": "abc123",
    "juwels-booster": "exalab",
    "generic-nvidia": "myproject",
}


def cases():
    for name in profile.builtin_names():
        p = profile.load(name).profile
        forms = ["sbatch", "srun"] if p.uses_slurm else ["local"]
        for form in forms:
            yield name, form


def golden_plan(name, form):
    p = profile.load(name)
    nodes = 2 if p.profile.uses_slurm else 1
    devices = p.profile.node.gpus or p.profile.node.cores
    spec = JobSpec(
        command=("python", "-m", "experiments.classify", "--devices", str(devices), "--num-nodes", str(nodes), "--output", "results/a b"),
        nodes=nodes,
        gpus_per_node=devices,
        binds=("/data/sets",) if p.profile.container.runtime else (),
    )
    settings = params.Settings(account=ACCOUNTS.get(name), image="site" if p.profile.container.runtime else None)
    # The item's deps and outs: the sbatch form of a profile with fast storage stages them.
    inputs, outputs = ("experiments", "params.yaml"), ("results/a b/model", "results/a b/metrics.json")
    return make_plan(spec, "benchmark@pydoc-base-device_cfg4", "", p, settings, "/work/project", form, inputs=inputs, outputs=outputs)


@pytest.mark.parametrize(("name", "form"), list(cases()))
def test_golden(name, form, update_goldens):
    plan = golden_plan(name, form)
    assert plan.problems == ()
    text = render.render(plan)
    path = GOLDEN / f"{name}.{form}.sh"
    if update_goldens:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path.name}: run pytest {__file__} --update-goldens"
    assert text == path.read_text(), f"{path.name} changed; if intended: pytest tests/unit/scripts/test_golden.py --update-goldens"


def test_no_stale_goldens():
    expected = {f"{name}.{form}.sh" for name, form in cases()}
    assert {p.name for p in GOLDEN.glob("*.sh")} == expected


def test_goldens_pass_bash_and_shellcheck():
    from orchestrator.scripts import lint
    from orchestrator.util.runner import SubprocessRunner

    require("shellcheck")
    scripts = {p.name: p.read_text() for p in GOLDEN.glob("*.sh")}
    assert lint.bash_problems(scripts, SubprocessRunner()) == []
    assert lint.shellcheck_problems(scripts, SubprocessRunner()) == []
