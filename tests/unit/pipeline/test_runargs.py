"""`orchestrator run`'s arguments in a stage command (orchestrator/pipeline/runargs.py)."""

import pytest

from orchestrator.pipeline.runargs import JobSpec, parse_run_args


def test_run_args_parse_like_the_cli():
    spec = parse_run_args(["-N", "2", "-G", "8", "--time", "1:00:00", "--bind", "/d", "--", "python", "x.py", "--devices", "8"], "here")
    assert spec == JobSpec(command=("python", "x.py", "--devices", "8"), nodes=2, gpus_per_node=8, time="1:00:00", binds=("/d",))


def test_bad_run_args_name_the_item():
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError, match="stage@x: Invalid value for '--nodes'"):
        parse_run_args(["--nodes", "zero", "--", "python"], "stage@x")


def test_cpus_makes_a_cpu_job_and_leaves_the_gpu_layout_at_its_default():
    spec = parse_run_args(["--cpus", "16", "-N", "2", "--", "python", "-m", "prep"], "here")
    assert spec == JobSpec(command=("python", "-m", "prep"), nodes=2, cpus=16)
    assert spec.gpus_per_node == 1  # not asked for: nothing reads it for a CPU job
    assert parse_run_args(["--", "python"], "here").cpus is None
    assert parse_run_args(["-G", "4", "--", "python"], "here") == JobSpec(command=("python",), gpus_per_node=4)


@pytest.mark.parametrize("args", [["--cpus", "4", "--gpus-per-node", "2"], ["-G", "1", "--cpus", "4"]])
def test_cpus_and_an_explicit_gpus_per_node_exclude_each_other(args):
    """Even -G 1, the default's value: given, it says GPU tasks, which --cpus contradicts."""
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError) as err:
        parse_run_args([*args, "--", "python"], "prepare@0")
    message = err.value.headline
    assert message.startswith("prepare@0: --cpus and --gpus-per-node exclude each other")
    assert "give one of them" in message


def test_cpus_must_be_a_positive_count():
    from orchestrator.errors import PipelineError

    for bad in ["0", "-3", "many"]:
        with pytest.raises(PipelineError, match="prepare@0: Invalid value for '--cpus'"):
            parse_run_args(["--cpus", bad, "--", "python"], "prepare@0")


def test_the_run_command_refuses_both_with_a_usage_error(tmp_path, monkeypatch):
    """`orchestrator run` itself (what DVC calls): one usage message, exit status 2, no traceback."""
    from support import invoke

    monkeypatch.chdir(tmp_path)
    done = invoke("run", "--name", "x", "--cpus", "4", "-G", "2", "--", "python", "-c", "pass")
    assert done.exit_code == 2, done.output
    assert "--cpus and --gpus-per-node exclude each other" in done.output and "Traceback" not in done.output
