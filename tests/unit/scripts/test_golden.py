"""Golden scripts: one per cluster profile and script form, compared byte for byte, a CPU job
(`orchestrator run --cpus N`: a shard of corpus preparation) on lumi, testbed and local, and
local's job staged as a cluster stages it (params' orchestrator.stage_locally). The jobs on
LUMI, JUWELS Booster and Frontier make requests of their own (memory, QOS, reservation,
constraint, sbatch options), the stage's and the project's.

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
from orchestrator.slurm.requests import Requests

GOLDEN = ROOT / "tests" / "golden"

ACCOUNTS = {
    "lumi": "project_465000858",
    "testbed": "project_465000858",
    "frontier": "abc123",
    "juwels-booster": "exalab",
    "generic-nvidia": "myproject",
}


# (the stage's requests: `orchestrator run --mem ...`; the project's: params.yaml's orchestrator.*)
REQUESTS = {
    "lumi": (Requests(mem="400G", sbatch_options=("--mail-type=END",)), {"reservation": "lumi_course"}),
    "juwels-booster": (Requests(qos="normal"), {"mem": "400G", "sbatch_options": ("--mail-type=FAIL",)}),
    "frontier": (Requests(constraint="nvme", sbatch_options=("--licenses=scratch:1",)), {"mem_per_cpu": "2G"}),
}


def cases():
    for name in profile.builtin_names():
        p = profile.load(name).profile
        forms = ["sbatch", "srun"] if p.uses_slurm else ["local"]
        for form in forms:
            yield name, form


# (profile, form, cores per task): lumi's on its CPU partition (LUMI-C's `small`), the
# testbed's on its one partition, local's as one process.
CPU_CASES = [("lumi", "sbatch", 16), ("testbed", "sbatch", 4), ("local", "local", 2)]


def golden_plan(name, form, **settings_kw):
    p = profile.load(name)
    nodes = 2 if p.profile.uses_slurm else 1
    devices = p.profile.node.gpus or p.profile.node.cores
    stage, project = REQUESTS.get(name, (Requests(), {}))
    spec = JobSpec(
        command=("python", "-m", "experiments.classify", "--devices", str(devices), "--num-nodes", str(nodes), "--output", "results/a b"),
        nodes=nodes,
        gpus_per_node=devices,
        binds=("/data/sets",) if p.profile.container.runtime else (),
        requests=stage,
    )
    settings = params.Settings(account=ACCOUNTS.get(name), image="site" if p.profile.container.runtime else None, **project, **settings_kw)
    # The item's deps and outs: the sbatch form of a profile with fast storage stages them.
    inputs, outputs = ("experiments", "params.yaml"), ("results/a b/model", "results/a b/metrics.json")
    return make_plan(spec, "benchmark@pydoc-base-device_cfg4", "", p, settings, "/work/project", form, inputs=inputs, outputs=outputs)


def cpu_plan(name, form, cpus):
    loaded = profile.load(name)
    spec = JobSpec(command=("python", "-m", "experiments.lm.prepare", "--shard", "3", "--output", "data/tokens/shard 3"), cpus=cpus)
    settings = params.Settings(account=ACCOUNTS.get(name), image="site" if loaded.profile.container.runtime else None)
    inputs, outputs = ("data/corpus", "params.yaml"), ("data/tokens/shard 3",)
    return make_plan(spec, "prepare@3", "", loaded, settings, "/work/project", form, inputs=inputs, outputs=outputs)


@pytest.mark.parametrize(("name", "form"), list(cases()))
def test_golden(name, form, update_goldens):
    plan = golden_plan(name, form)
    assert plan.problems == ()
    compare(render.render(plan), GOLDEN / f"{name}.{form}.sh", update_goldens)


@pytest.mark.parametrize(("name", "form", "cpus"), CPU_CASES)
def test_cpu_job_golden(name, form, cpus, update_goldens):
    plan = cpu_plan(name, form, cpus)
    assert plan.problems == () and plan.notes == ()
    compare(render.render(plan), GOLDEN / f"{name}.cpu.{form}.sh", update_goldens)


def test_staged_locally_golden(update_goldens):
    plan = golden_plan("local", "local", stage_locally=True)
    assert plan.problems == () and plan.staging is not None
    compare(render.render(plan), GOLDEN / "local.staged.local.sh", update_goldens)


def compare(text, path, update_goldens):
    if update_goldens:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path.name}: run pytest {__file__} --update-goldens"
    assert text == path.read_text(), f"{path.name} changed; if intended: pytest tests/unit/scripts/test_golden.py --update-goldens"


def test_no_stale_goldens():
    expected = {f"{name}.{form}.sh" for name, form in cases()} | {f"{name}.cpu.{form}.sh" for name, form, _ in CPU_CASES}
    expected.add("local.staged.local.sh")
    assert {p.name for p in GOLDEN.glob("*.sh")} == expected


def test_goldens_pass_bash_and_shellcheck():
    from orchestrator.scripts import lint
    from orchestrator.util.runner import SubprocessRunner

    require("shellcheck")
    scripts = {p.name: p.read_text() for p in GOLDEN.glob("*.sh")}
    assert lint.bash_problems(scripts, SubprocessRunner()) == []
    assert lint.shellcheck_problems(scripts, SubprocessRunner()) == []
