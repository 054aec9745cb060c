"""A team's own SIF (params orchestrator.image: x.sif): the container every task runs in,
with its digest a dependency only where the stage declares it."""

from __future__ import annotations

from orchestrator.config import params, profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import render
from orchestrator.scripts.plan import make_plan

SIF = "/project/project_465000858/klajster.sif"
CMD = ("python", "experiments/scripts/evaluate_lightning_classification.py", "--num-nodes", "1", "--devices", "8")


def plan_for(cluster="lumi", image=SIF, inputs=(), workspace="/work/proj", **job):
    settings = params.Settings(account="project_465000858", image=image)
    job = {"command": CMD, "nodes": 1, "gpus_per_node": 8, **job}
    spec = JobSpec(**job)
    return make_plan(spec, "bench@x", "", profile.load(cluster), settings, workspace, inputs=inputs)


def test_the_tasks_run_in_the_file_params_name_not_the_profiles_image():
    p = plan_for()
    assert p.problems == ()
    assert p.container.image == SIF and p.container.file == SIF
    script = render.render(p)
    assert f"    {SIF} \\\n" in script and "exec singularity exec \\\n" in script
    assert "orchestrator.sif" not in script  # the profile's container.image is not used


def test_a_relative_file_is_relative_to_the_project():
    assert plan_for(image="images/team.sif").container.file == "/work/proj/images/team.sif"
    assert plan_for(image="../shared/team.sif").container.file == "/work/shared/team.sif"
    spaced = plan_for(image="my images/team.sif", workspace="/work/my proj")
    assert spaced.container.image == "'/work/my proj/my images/team.sif'"  # quoted for the shell


def test_on_apptainer_profiles_too():
    p = plan_for("generic-nvidia", command=("python", "train.py"), gpus_per_node=4)
    assert p.problems == () and p.container.runtime == "apptainer" and p.container.file == SIF
    script = render.render(p)
    assert f"    {SIF} \\\n" in script and "exec apptainer exec \\\n" in script and "--nv" in script


def test_an_unpinned_image_file_is_a_note_and_declaring_its_digest_pins_it():
    (note,) = plan_for().notes
    assert note.startswith(f"runs in {SIF}, which no dependency pins")
    assert f"`sha256sum {SIF} > containers/klajster.digest`" in note
    assert plan_for(inputs=("experiments", "containers/klajster.digest")).notes == ()


def test_nothing_about_the_image_where_tasks_run_on_the_host():
    assert plan_for(container=False).container is None and plan_for(container=False).notes == ()
    local = plan_for("local", command=("python", "train.py"), gpus_per_node=1)
    assert local.container is None and local.notes == () and local.problems == ()
    assert plan_for(inputs=None).notes == ()  # an ad-hoc job (no stage): no deps to pin it with


def test_named_images_still_use_the_profiles_path_and_none_still_fails():
    named = plan_for(image="lumi")
    assert named.container.file is None and named.container.image == '"/project/${SLURM_JOB_ACCOUNT}/containers/orchestrator.sif"'
    assert named.notes == ()
    (problem,) = plan_for(image="none").problems
    assert "orchestrator.image is 'none'" in problem and "your own image file (a path ending .sif)" in problem
