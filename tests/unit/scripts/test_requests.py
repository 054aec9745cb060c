"""A job's own requests (memory, QOS, reservation, constraint, sbatch options: the stage's over
the project's) as directives, their conflicts with the partition, and the cost warnings."""

import pytest

from orchestrator.config import params, profile
from orchestrator.errors import ConfigError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import costs, render
from orchestrator.scripts.plan import make_plan
from orchestrator.slurm.requests import Requests

CMD = ("python", "-m", "experiments.classify")


NONE = Requests()


def plan_for(cluster="lumi", *, stage=NONE, account="project_465000858", item="train@x", **settings_and_job):
    job = {k: settings_and_job.pop(k) for k in ("nodes", "gpus_per_node", "partition", "cpus", "time") if k in settings_and_job}
    spec = JobSpec(command=CMD, requests=stage, **job)
    settings = params.Settings(account=account, image="site", **settings_and_job)
    return make_plan(spec, item, "", profile.load(cluster), settings, "/work/proj", "sbatch")


def directives(plan) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in render.render(plan).splitlines() if line.startswith("#SBATCH ")]


def test_the_stages_requests_are_header_lines_after_the_layout():
    asked = Requests(mem="400G", qos="high", reservation="course", constraint="a&b", sbatch_options=("--licenses=scratch:1",))
    p = plan_for("juwels-booster", stage=asked, account="exalab", nodes=1, gpus_per_node=4)
    assert p.problems == ()
    lines = directives(p)
    for line in ["--qos=high", "--constraint=a&b", "--reservation=course", "--mem=400G", "--licenses=scratch:1"]:
        assert line in lines
    assert lines.index("--licenses=scratch:1") < lines.index("--open-mode=append")  # the log stays the last word
    assert p.requests == asked


def test_a_stages_memory_replaces_the_projects_and_the_partitions_as_one_request():
    """LUMI's small-g asks --mem-per-gpu=60G itself; the project's --mem replaces it, the stage's --mem-per-cpu that."""
    assert "--mem-per-gpu=60G" in directives(plan_for(partition="small-g", gpus_per_node=2))
    project = plan_for(partition="small-g", gpus_per_node=2, mem="100G")
    assert "--mem=100G" in directives(project) and not any(d.startswith("--mem-per-gpu") for d in directives(project))
    stage = plan_for(partition="small-g", gpus_per_node=2, mem="100G", stage=Requests(mem_per_cpu="2G"))
    assert [d for d in directives(stage) if d.startswith("--mem")] == ["--mem-per-cpu=2G"]


def test_the_stages_options_and_values_win_over_the_projects():
    p = plan_for(
        qos="low",
        reservation="r1",
        sbatch_options=("--mail-type=END", "--licenses=a:1"),
        stage=Requests(qos="high", sbatch_options=("--mail-type=FAIL",)),
        gpus_per_node=8,
    )
    lines = directives(p)
    assert "--qos=high" in lines and "--qos=low" not in lines and "--reservation=r1" in lines
    assert [line for line in lines if line.startswith(("--mail-type", "--licenses"))] == ["--licenses=a:1", "--mail-type=FAIL"]


def test_the_srun_form_passes_them_quoted():
    spec = JobSpec(command=CMD, gpus_per_node=8, requests=Requests(constraint="a|b"))
    p = make_plan(spec, "t@x", "", profile.load("lumi"), params.Settings(account="project_465000858", image="site"), "/w", "srun")
    assert p.problems == () and "    '--constraint=a|b' \\\n" in render.render(p)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        (
            {"partition": "debug", "stage": Requests(qos="normal")},
            "QOS normal (--qos, or params' orchestrator.qos) contradicts partition debug",
        ),
        ({"stage": Requests(mem="600G")}, "--mem=600G asks 600 GiB per node, more than a frontier node's 512 GB"),
        ({"stage": Requests(mem_per_gpu="80G")}, "--mem-per-gpu=80G asks 640 GiB per node"),
        ({"cpus": 4, "stage": Requests(mem_per_gpu="8G")}, "--mem-per-gpu on a job without GPUs"),
    ],
)
def test_requests_that_contradict_the_partition_or_the_node_are_problems(kw, said):
    p = plan_for("frontier", account="abc123", gpus_per_node=8, **kw)
    assert any(said in problem for problem in p.problems), p.problems


def test_params_refuse_what_slurm_would_in_one_message():
    data = {"orchestrator": {"mem": "1G", "mem_per_gpu": "2G", "qos": "a b", "sbatch_options": ["--time=1:00", "--array=1-2", "-w"]}}
    with pytest.raises(ConfigError) as err:
        params.from_data(data, "params.yaml")
    text = str(err.value)
    assert "orchestrator.mem and orchestrator.mem_per_gpu exclude each other" in text
    assert "orchestrator.qos 'a b'" in text
    assert "orchestrator.sbatch_options: '-w': write each as --name" in text
    assert "'--time=1:00' (use --time), '--array=1-2': the orchestrator sets these itself" in text


def test_params_requests_per_cluster_are_read_like_the_others():
    data = {"orchestrator": {"qos": "normal"}, "clusters": {"lumi": {"orchestrator": {"sbatch_options": ["--licenses=scratch:1"]}}}}
    prm = params.from_data(data, "params.yaml").for_cluster("lumi")
    assert prm.settings.requests == Requests(qos="normal", sbatch_options=("--licenses=scratch:1",))


# --- cost warnings ---------------------------------------------------------------------


def test_one_gpu_on_a_whole_booster_node_is_billed_for_four():
    p = plan_for("juwels-booster", account="exalab", gpus_per_node=1)
    assert p.problems == ()
    assert p.waste == ("billed for 4 GPUs (a whole node of booster: 48 core-hours/h), uses 1: ask for 4 GPUs per node (--gpus-per-node 4)")


def test_lumi_names_the_partition_billed_by_the_gcd_in_place_of_the_note():
    p = plan_for(partition="standard-g", gpus_per_node=1)
    assert p.waste == (
        "billed for 8 GPUs (a whole node of standard-g: 4 GPU-hours/h), uses 1: ask for 8 GPUs per node (--gpus-per-node 8), "
        "or a partition billed by the GPU (small-g: 0.5 GPU-hours/h)"
    )
    assert not any("bills 4 GPU-hours an hour" in n for n in p.notes)  # said once, by the warning


def test_fewer_nodes_are_offered_where_the_gpus_fit():
    p = plan_for("frontier", account="abc123", nodes=2, gpus_per_node=2)
    assert "uses 4 (2 per node)" in p.waste and "put its 4 GPUs on fewer nodes (-N 1 --gpus-per-node 4)" in p.waste


@pytest.mark.parametrize(
    ("cluster", "account", "kw"),
    [
        ("juwels-booster", "exalab", {"gpus_per_node": 4}),  # the whole node used
        ("lumi", "project_465000858", {"gpus_per_node": 1}),  # small-g chosen: billed by the GCD
        ("testbed", "project_465000858", {"gpus_per_node": 1}),  # no billing stated: nothing known to be billed
        ("lumi", "project_465000858", {"cpus": 8}),  # a CPU job: its note says it
    ],
)
def test_no_warning_where_nothing_is_known_to_be_wasted(cluster, account, kw):
    assert plan_for(cluster, account=account, **kw).waste is None


def test_warnings_are_grouped_one_line_per_kind():
    wasteful = [plan_for("juwels-booster", account="exalab", gpus_per_node=1, item=f"train@{i}") for i in range(50)]
    fine = [plan_for("juwels-booster", account="exalab", gpus_per_node=4, item="big@0")]
    two = [plan_for("juwels-booster", account="exalab", gpus_per_node=2, item="mid@0")]
    lines = costs.warnings([*wasteful, *fine, *two])
    assert len(lines) == 2
    assert lines[0].startswith("train@0, train@1, train@2 (+47 more): billed for 4 GPUs")
    assert lines[1].startswith("mid@0: billed for 4 GPUs (a whole node of booster: 48 core-hours/h), uses 2")


def test_render_shows_the_requests_and_warns_of_waste_with_exit_status_0(tmp_path, monkeypatch):
    import yaml
    from support import invoke, make_project

    cmd = "orchestrator run --gpus-per-node ${item.g} --mem 100G --no-container --sbatch-option=--mail-type=END -- python t.py"
    stages = {"train": {"matrix": {"g": [1, 4]}, "cmd": cmd}}
    settings = {"orchestrator": {"account": "exalab", "qos": "normal"}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(settings))
    monkeypatch.chdir(project)
    done = invoke("render", "--cluster", "juwels-booster", "-o", str(tmp_path / "out"))
    assert done.exit_code == 0, done.output
    assert "requests" in done.stdout and "mem=100G qos=normal --mail-type=END" in done.stdout
    assert "warning: train@1: billed for 4 GPUs (a whole node of booster: 48 core-hours/h), uses 1" in done.stderr
    assert "train@4" not in done.stderr
    assert "#SBATCH --mem=100G\n" in (tmp_path / "out" / "train@1.sbatch").read_text()
