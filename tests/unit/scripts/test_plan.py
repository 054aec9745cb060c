"""Planning: resources, account, time and Lightning layout checked against the profile."""

from support import ROOT

from orchestrator.config import params, profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts.plan import make_plan

SETTINGS = params.Settings(account="project_465000858", image="site")
CMD = ("python", "-m", "experiments.classify")


def plan_for(cluster, *, settings=SETTINGS, form=None, inputs=None, outputs=(), wdir="", **job):
    spec = JobSpec(command=job.pop("command", CMD), **job)
    return make_plan(spec, "stage@item", wdir, profile.load(cluster), settings, "/work/proj", form, inputs=inputs, outputs=outputs)


def test_lumi_2x8_asks_for_two_full_nodes_with_official_masks():
    p = plan_for("lumi", nodes=2, gpus_per_node=8, command=CMD + ("--devices", "8", "--num-nodes", "2"))
    assert p.problems == ()
    for arg in [
        "--nodes=2",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--account=project_465000858",
        "--partition=standard-g",
        "--exclusive",
    ]:
        assert arg in p.scheduler_args
    assert (
        "--cpu-bind=mask_cpu:0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000" in p.step_args
    )
    assert "--cpus-per-task=7" in p.step_args


def test_too_many_gpus_per_node():
    assert (
        "asks for 8 GPUs per node, but juwels-booster nodes have 4"
        in plan_for("juwels-booster", gpus_per_node=8, settings=params.Settings(account="exalab")).problems
    )


def test_partition_limits_and_unknown_partition():
    p = plan_for("lumi", nodes=8, partition="small-g", time="4-00:00:00")
    assert "asks for 8 nodes, but partition small-g allows at most 4" in p.problems
    assert "time 4-00:00:00 exceeds partition small-g's limit of 3-00:00:00" in p.problems
    p = plan_for("lumi", partition="gpu")
    assert any(msg.startswith("unknown partition 'gpu' on lumi; partitions: standard-g, small-g, dev-g") for msg in p.problems)


def test_account_must_match_the_pattern_or_be_given():
    p = plan_for("lumi", account="project_123")
    assert any("account 'project_123' does not match lumi's pattern" in m and "project_465000858" in m for m in p.problems)
    p = plan_for("lumi", settings=params.Settings())
    assert any(m.startswith("no account: set orchestrator.account in params.yaml") for m in p.problems)


def test_account_with_characters_directives_cannot_carry():
    p = plan_for("generic-nvidia", settings=params.Settings(account="my project"))
    assert any("'--account=my project' has characters a Slurm directive cannot carry" in m for m in p.problems)


def test_bad_time_format():
    assert any("is not a Slurm time" in m for m in plan_for("lumi", time="2 hours").problems)


def test_lightning_devices_and_nodes_must_match_the_tasks():
    p = plan_for("lumi", nodes=2, gpus_per_node=4, command=CMD + ("--devices=8", "--num_nodes", "1"))
    assert "tasks per node (4, one per GPU) != Lightning devices (8) in the command" in p.problems
    assert "nodes (2) != Lightning num_nodes (1) in the command" in p.problems


def test_local_runs_one_node_and_at_most_its_cores():
    p = plan_for("local", nodes=2, gpus_per_node=4)
    assert any(m.startswith("asks for 2 nodes, but profile 'local' runs on this one machine") for m in p.problems)
    assert "asks for 4 processes per node, but local nodes have 2 cores" in p.problems
    assert p.scheduler_args == () and p.form == "local"


def test_form_must_fit_the_profile():
    assert any("form 'local' does not fit profile 'lumi'" in m for m in plan_for("lumi", form="local").problems)
    assert any("form 'sbatch' does not fit profile 'local'" in m for m in plan_for("local", form="sbatch").problems)


def test_shared_partition_binds_cores_without_masks():
    p = plan_for("lumi", partition="small-g", gpus_per_node=2)
    assert "--cpu-bind=cores" in p.step_args and "--exclusive" not in p.scheduler_args
    assert p.binding is None


def test_overlapping_explicit_masks_name_the_tasks(tmp_path):
    text = profile.load("lumi").text.replace(
        'gpu_cores: ["48-55", "56-63", "16-23", "24-31", "0-7", "8-15", "32-39", "40-47"]',
        "cpu_masks: ['0xfe000000000000', '0xfe000000000000', '0xfe0000', '0xfe000000', '0xfe', '0xfe00', '0xfe00000000', '0xfe0000000000']",
    )
    path = tmp_path / "lumi-typo.yaml"
    path.write_text(text)
    spec = JobSpec(command=CMD, nodes=1, gpus_per_node=8)
    p = make_plan(spec, "s@i", "", profile.load(str(path)), SETTINGS, "/w")
    assert "tasks 0 and 1 share cores 49-55 (0xfe000000000000 and 0xfe000000000000)" in p.problems


def test_container_binds_workspace_and_extra_binds():
    p = plan_for("lumi", binds=("/scratch/data",))
    flags = list(p.container.flags)
    assert "--bind /work/proj" in flags and "--bind /scratch/data" in flags and "--rocm" not in flags  # LUMI's images bring their ROCm
    assert p.container.runtime == "singularity"
    assert plan_for("lumi", container=False).container is None
    assert any("cannot bind '/a:b'" in m for m in plan_for("lumi", binds=("/a:b",)).problems)


def test_the_training_and_the_scripts_agree_on_the_requeue_exit_status():
    """Read from the training module's source: importing it brings Lightning (~8 s of CPU) into this worker."""
    import ast

    from orchestrator.scripts.plan import REQUEUE_EXIT as scripts

    tree = ast.parse((ROOT / "experiments/common/requeue.py").read_text())
    assigned = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert ast.literal_eval(assigned["REQUEUE_EXIT"]) == scripts == 75


def test_a_container_profile_needs_the_image_named_in_params():
    """Else the stages would not depend on the image's digest: a new image would not make them stale."""
    p = plan_for("lumi", settings=params.Settings(account="project_465000858"), inputs=())
    (problem,) = p.problems
    assert problem.startswith("profile lumi runs every task in a container (/project/${SLURM_JOB_ACCOUNT}/containers/orchestrator.sif)")
    assert "orchestrator.image is 'none'" in problem and "containers/<image>.digest" in problem
    assert plan_for("lumi", container=False, settings=params.Settings(account="project_465000858"), inputs=()).problems == ()
    assert plan_for("testbed", inputs=()).problems == ()
    # An ad-hoc job (no stage, paths unknown) has no dependencies to keep right.
    assert plan_for("lumi", settings=params.Settings(account="project_465000858")).problems == ()


def test_staging_runs_the_job_from_a_copy_on_fast_storage():
    inputs, outputs = ("data/train", "params.yaml"), ("results/a/model", "results/a/metrics.json")
    p = plan_for("lumi", inputs=inputs, outputs=outputs, wdir="sub")
    assert p.staging is not None and not p.staging.node_local
    assert p.staging.inputs == inputs + outputs and p.staging.outputs == outputs  # outputs in: a requeued run's checkpoint
    assert p.run_dir == """"$ORCH_STAGE"/sub""" and ("ORCH_STAGE", '"$ORCH_WORKDIR/work"') in p.env
    assert '--pwd "$ORCH_STAGE"/sub' in p.container.flags
    assert plan_for(
        "generic-nvidia", inputs=inputs, outputs=outputs, settings=params.Settings(account="x", image="nvidia")
    ).staging.node_local
    # Not staged: paths unknown (an ad-hoc job), the blocking srun form, no fast storage.
    assert plan_for("lumi").staging is None and plan_for("lumi").run_dir == "/work/proj"
    assert plan_for("lumi", inputs=inputs, form="srun").staging is None
    assert plan_for("local", inputs=inputs, outputs=outputs).staging is None


def test_stage_locally_stages_a_local_job_as_a_cluster_stages_it():
    import dataclasses

    from orchestrator.scripts.plan import LOCAL_STAGE_ROOT

    inputs, outputs = ("src", "params.yaml"), ("out/a",)
    staged = params.Settings(stage_locally=True)
    p = plan_for("local", inputs=inputs, outputs=outputs, settings=staged, wdir="sub")
    assert p.staging is not None and p.staging.inputs == inputs + outputs and p.staging.outputs == outputs
    assert p.run_dir == '"$ORCH_STAGE"/sub'
    workdir = dict(p.env)["ORCH_WORKDIR"]
    assert workdir.startswith('"/tmp/orchestrator-${USER}/stage"/stage@item.') and LOCAL_STAGE_ROOT == "/tmp/orchestrator-${USER}/stage"
    # A profile's own storage.workdir_root is where it stages; an ad-hoc job is never staged.
    local = profile.load("local")
    own = dataclasses.replace(local.profile, storage=dataclasses.replace(local.profile.storage, workdir_root="/scratch/${USER}"))
    spec = JobSpec(command=CMD)
    mine = make_plan(spec, "s@i", "", dataclasses.replace(local, profile=own), staged, "/w", inputs=inputs, outputs=outputs)
    assert dict(mine.env)["ORCH_WORKDIR"].startswith('"/scratch/${USER}"/s@i.')
    assert plan_for("local", settings=staged).staging is None
    # On Slurm the profile decides: the setting changes nothing there.
    lumi_settings = dataclasses.replace(SETTINGS, stage_locally=True)
    assert plan_for("lumi", inputs=inputs, outputs=outputs, settings=lumi_settings) == plan_for("lumi", inputs=inputs, outputs=outputs)
    assert plan_for("testbed", inputs=inputs, form="srun", settings=lumi_settings).staging is None


FRONTIER = params.Settings(account="abc123", image="site")


def test_frontier_caps_the_time_by_the_jobs_size_before_sbatch_does():
    """[FUG] "Job Priority by Node Count": 2 h up to 91 nodes, 6 h up to 183, 12 h above."""
    small = plan_for("frontier", settings=FRONTIER, nodes=2, gpus_per_node=8, time="06:00:00")
    assert small.problems == (
        "time 06:00:00 exceeds partition batch's limit of 02:00:00 for 2 nodes "
        "(by job size: up to 91 nodes 02:00:00, up to 183 nodes 06:00:00, else 12:00:00)",
    )
    assert plan_for("frontier", settings=FRONTIER, nodes=100, gpus_per_node=8, time="06:00:00").problems == ()
    assert "02:00:00 for 2 nodes" not in " ".join(plan_for("frontier", settings=FRONTIER, nodes=2, time="02:00:00").problems)
    big = plan_for("frontier", settings=FRONTIER, nodes=200, gpus_per_node=8, time="12:00:00")
    assert big.problems == () and "--time=12:00:00" in big.scheduler_args


def test_a_queue_that_is_a_qos_of_another_partition_renders_both():
    p = plan_for("frontier", settings=FRONTIER, partition="debug", nodes=2, gpus_per_node=8, time="01:00:00")
    assert p.problems == ()
    assert "--partition=batch" in p.scheduler_args and "--qos=debug" in p.scheduler_args
    assert "--partition=debug" not in p.scheduler_args


def test_site_options_the_plan_does_not_derive_go_on_every_job():
    p = plan_for("frontier", settings=FRONTIER, nodes=1, gpus_per_node=8)
    assert "--network=disable_rdzv_get" in p.scheduler_args
    assert ("FI_CXI_RDZV_PROTO", '"alt_read"') in [(k, str(v)) for k, v in p.env]
