"""`render --check`'s look at what breaks only on the cluster: the image file where the jobs
run, and the profile's example account (files a staged job lacks: test_staged_deps.py)."""

from __future__ import annotations

import dataclasses

import pytest
from fakes import FakeRunner, ok

from orchestrator.config import params, profile
from orchestrator.config.profile_schema import Container
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import cluster_checks
from orchestrator.scripts.plan import make_plan

SCRIPT = "experiments/scripts/evaluate.py"
CMD = ("python", SCRIPT, "--pipeline-params-path", "experiments/configs/eval.yaml", "--output-path", "data/out", "--retrains", "1")


def plan_for(workspace, *, cluster="lumi", image="lumi", inputs=(), outputs=(), item="bench@x", wdir="", form=None, command=CMD, **kw):
    loaded = kw.pop("loaded", None) or profile.load(cluster)
    # Not lumi's account_example, which `render --check` warns of (test_placeholder_* below).
    settings = params.Settings(account=kw.pop("account", "project_465001234"), image=image, **kw)
    spec = JobSpec(command=command, nodes=1, gpus_per_node=1)
    return make_plan(spec, item, wdir, loaded, settings, str(workspace), form, inputs=inputs, outputs=outputs)


# --- the image file --------------------------------------------------------------------------


def cluster_named(name):
    return FakeRunner(answers={"scontrol": ok(f"ClusterName             = {name}\n")})


def test_a_missing_image_file_fails_the_check_on_the_cluster_itself(tmp_path):
    sif = tmp_path / "team.sif"
    plans = [plan_for(tmp_path, image=str(sif), item=f"bench@{i}") for i in range(2)]
    lumi = profile.load("lumi")
    found = cluster_checks.check(plans, lumi, cluster_named("lumi"))
    (problem,) = found.problems
    assert problem.startswith(f"bench@0, bench@1: image file {sif} does not exist on this machine, where lumi's jobs run")
    assert found.notes == ()
    sif.write_text("an image")
    assert cluster_checks.check(plans, lumi, cluster_named("lumi")) == cluster_checks.Findings()


def test_elsewhere_the_image_file_is_not_looked_for_and_a_note_says_so(tmp_path):
    plans = [plan_for(tmp_path, image="/project/project_465001234/klajster.sif")]
    lumi = profile.load("lumi")
    found = cluster_checks.check(plans, lumi, cluster_named("testbed"))
    assert found.problems == ()
    (note,) = found.notes
    assert note.startswith("image /project/project_465001234/klajster.sif not looked for: this is not a login node of lumi")
    assert "ClusterName here is 'testbed'" in note
    no_slurm = FakeRunner(installed=set())
    (note,) = cluster_checks.check(plans, lumi, no_slurm).notes
    assert "scontrol not found" in note and no_slurm.calls == []


def test_a_profile_without_a_scheduler_runs_here(tmp_path):
    local = profile.load("local")
    with_runtime = dataclasses.replace(
        local, profile=dataclasses.replace(local.profile, container=Container(runtime="apptainer", image="x.sif"))
    )
    runner = FakeRunner()
    plans = [plan_for(tmp_path, image="images/team.sif", loaded=with_runtime, command=("python", "t.py"))]
    (problem,) = cluster_checks.check(plans, with_runtime, runner).problems
    assert f"image file {tmp_path}/images/team.sif does not exist" in problem and runner.calls == []


def test_no_image_file_no_question_asked(tmp_path):
    runner = cluster_named("lumi")
    assert cluster_checks.check([plan_for(tmp_path)], profile.load("lumi"), runner) == cluster_checks.Findings()
    assert runner.calls == []


# --- the image, where jobs are submitted from ------------------------------------------------------


def test_a_missing_image_is_named_with_the_references_submit_can_expand(tmp_path):
    loaded = profile.load("lumi")
    c = dataclasses.replace(loaded.profile.container, image=f"{tmp_path}/${{SLURM_JOB_ACCOUNT}}/${{USER}}/site.sif")
    loaded = dataclasses.replace(loaded, profile=dataclasses.replace(loaded.profile, container=c))
    plan = plan_for(tmp_path, loaded=loaded, image="site")
    expected = f"{tmp_path}/project_465001234/alice/site.sif"
    assert cluster_checks.missing_image(plan, "alice").startswith(f"the container image {expected} does not exist")
    (tmp_path / "project_465001234" / "alice").mkdir(parents=True)
    (tmp_path / "project_465001234" / "alice" / "site.sif").write_bytes(b"SIF")
    assert cluster_checks.missing_image(plan, "alice") is None


def test_an_image_only_the_job_can_locate_is_not_judged(tmp_path):
    loaded = profile.load("lumi")
    c = dataclasses.replace(loaded.profile.container, image="${SCRATCH}/site.sif")
    loaded = dataclasses.replace(loaded, profile=dataclasses.replace(loaded.profile, container=c))
    assert cluster_checks.missing_image(plan_for(tmp_path, loaded=loaded, image="site"), "alice") is None
    assert cluster_checks.missing_image(plan_for(tmp_path, cluster="testbed", image="none"), "alice") is None  # no container


# --- the profile's example account ------------------------------------------------------------------


def test_placeholder_account_is_a_warning_that_names_the_fix(tmp_path):
    lumi = profile.load("lumi")
    plans = [plan_for(tmp_path, account="project_465000858", item=f"bench@{i}") for i in range(2)]
    assert plans[0].problems == ()  # rendering before an account is known stays possible
    found = cluster_checks.check(plans, lumi, cluster_named("testbed"))
    assert found.problems == ()  # a project's CI renders for clusters whose account only the login node knows
    (problem,) = found.warnings
    assert problem == (
        "bench@0, bench@1: account 'project_465000858' is lumi's example (scheduler.account_example), not your project's: "
        "set orchestrator.account in params.yaml or pass --account"
    )


def test_frontiers_example_account_is_a_placeholder_too(tmp_path):
    frontier = profile.load("frontier")
    plans = [plan_for(tmp_path, cluster="frontier", image="none", account="abc123")]
    (problem,) = cluster_checks.check(plans, frontier, cluster_named("testbed")).warnings
    assert "account 'abc123' is frontier's example" in problem


def test_an_example_account_that_exists_is_no_placeholder(tmp_path):
    # The testbed makes its example account itself (account_example_exists: true).
    testbed = profile.load("testbed")
    plans = [plan_for(tmp_path, cluster="testbed", image="none", account="project_465000858")]
    assert cluster_checks.check(plans, testbed, cluster_named("testbed")).warnings == ()


def test_a_folder_without_dvc_yaml_is_told_so_before_slurm_is_asked_which_cluster_this_is(tmp_path):
    from orchestrator.errors import PipelineError
    from orchestrator.scripts import matrix

    runner = FakeRunner()
    with pytest.raises(PipelineError, match="no dvc.yaml in"):
        matrix.render_matrix(tmp_path, None, runner)
    assert runner.calls == []  # no `scontrol show config`: it can take seconds where the controller does not answer
