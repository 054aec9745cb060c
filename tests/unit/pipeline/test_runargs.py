"""`orchestrator run`'s arguments in a stage command (orchestrator/pipeline/runargs.py)."""

import pytest

from orchestrator.pipeline.runargs import JobSpec, parse_run_args


def test_run_args_parse_like_the_cli():
    args = ["-N", "2", "--gpus-per-node", "8", "--time", "1:00:00", "--bind", "/d", "--", "python", "x.py", "--devices", "8"]
    spec = parse_run_args(args, "here")
    assert spec == JobSpec(command=("python", "x.py", "--devices", "8"), nodes=2, gpus_per_node=8, time="1:00:00", binds=("/d",))


@pytest.mark.parametrize(
    ("args", "per_node"),
    [
        (["-N", "2", "--gpus", "8"], 4),
        (["-N", "2", "--gpus", "16"], 8),
        (["-G", "4"], 4),
        (["-N", "1", "-G4"], 4),
        (["-N", "3", "--gpus=3"], 1),
        ([], 1),
    ],
)
def test_gpus_is_slurms_gpus_of_the_whole_job_spread_over_the_nodes(args, per_node):
    """--gpus as sbatch reads it; -G too, on one node (where its old meaning, per node, agrees)."""
    assert parse_run_args([*args, "--", "python"], "here").gpus_per_node == per_node


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # A Slurm user's -N 2 -G 8 (8 in all) and a project written when -G was per node (16): never silently either.
        (
            ["-N", "2", "-G", "8"],
            "-G 8 with -N 2: Slurm reads -G as the GPUs of the whole job (8 in all), while earlier releases of `orchestrator run` read it "
            "per node (16 in all); write which you mean: --gpus 8 (the job's, 4 per node) or --gpus-per-node 8",
        ),
        (["-N", "2", "-G", "3"], "--gpus 3 (the job's, a multiple of 2 to spread evenly) or --gpus-per-node 3"),
        (["-N", "2", "--gpus", "3"], "--gpus 3 does not spread evenly over 2 nodes: --gpus is the GPUs of the whole job (as in Slurm)"),
        (["-N", "4", "--gpus", "2"], "give a multiple of 4, or --gpus-per-node"),
        (["-G", "8", "--gpus-per-node", "4"], "-G 8 and --gpus-per-node 4 exclude each other"),
        (["-G", "8", "--gpus", "8"], "--gpus 8 and -G 8 exclude each other"),
        (["-G", "mi250:8"], "the GPU type is the profile's (its partition, or --constraint): give the count only, -G 8"),
        (["-G", "0"], "'0' is not a number of GPUs"),
        (["-G", "-G"], "is not a number of GPUs"),
    ],
)
def test_a_gpu_count_that_is_not_slurms_or_does_not_divide_is_one_message(args, said):
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError) as err:
        parse_run_args([*args, "--", "python"], "train@x")
    assert said in str(err.value) and str(err.value).startswith("train@x: ")


def test_bad_run_args_name_the_item():
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError, match="stage@x: Invalid value for '--nodes'"):
        parse_run_args(["--nodes", "zero", "--", "python"], "stage@x")


def test_cpus_makes_a_cpu_job_and_leaves_the_gpu_layout_at_its_default():
    spec = parse_run_args(["--cpus", "16", "-N", "2", "--", "python", "-m", "prep"], "here")
    assert spec == JobSpec(command=("python", "-m", "prep"), nodes=2, cpus=16)
    assert spec.gpus_per_node == 1  # not asked for: nothing reads it for a CPU job
    assert parse_run_args(["--", "python"], "here").cpus is None
    assert parse_run_args(["--gpus-per-node", "4", "--", "python"], "here") == JobSpec(command=("python",), gpus_per_node=4)


@pytest.mark.parametrize(
    ("args", "gpus"),
    [(["--cpus", "4", "--gpus-per-node", "2"], "--gpus-per-node"), (["-G", "1", "--cpus", "4"], "-G"), (["--gpus=2", "-c", "4"], "--gpus")],
)
def test_cpus_and_an_explicit_gpu_count_exclude_each_other(args, gpus):
    """Even -G 1, the default's value: given, it says GPU tasks, which --cpus contradicts."""
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError) as err:
        parse_run_args([*args, "--", "python"], "prepare@0")
    message = err.value.headline
    assert message.startswith(f"prepare@0: --cpus and {gpus} exclude each other")
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
    assert "--cpus and -G exclude each other" in done.output and "Traceback" not in done.output


def test_requests_parse_as_slurm_spells_them():
    from orchestrator.slurm.requests import Requests

    args = ["--mem-per-gpu", "60G", "-q", "high", "--reservation", "course", "-C", "nvme&mi250", "--sbatch-option=--licenses=scratch:1"]
    spec = parse_run_args([*args, "--sbatch-option", "--mail-type=END", "--", "python"], "here")
    assert spec.requests == Requests(
        mem_per_gpu="60G",
        qos="high",
        reservation="course",
        constraint="nvme&mi250",
        sbatch_options=("--licenses=scratch:1", "--mail-type=END"),
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mem", "64G", "--mem-per-gpu", "8G"], "--mem and --mem-per-gpu exclude each other (as in Slurm)"),
        (["--mem", "64 GB"], "--mem '64 GB': expected a Slurm memory size"),
        (["-q", "a b"], "--qos 'a b': allowed are letters, digits"),
        (["--sbatch-option=--time=1:00:00"], "--sbatch-option: '--time=1:00:00' (use --time): the orchestrator sets this itself"),
        (["--sbatch-option=--acc=x"], "'--acc=x' (is --account: use --account)"),
        (["--sbatch-option=-n4"], "'-n4' (is --ntasks)"),
        (
            ["--sbatch-option=--array=1-3", "--sbatch-option=--gpus=8"],
            "'--array=1-3', '--gpus=8' (use --gpus): the orchestrator sets these",
        ),
        (["--sbatch-option=licenses=x"], "'licenses=x': write each as --name or --name=value"),
    ],
)
def test_bad_requests_are_one_message_naming_each(args, said):
    from orchestrator.errors import PipelineError

    with pytest.raises(PipelineError) as err:
        parse_run_args([*args, "--", "python"], "train@x")
    assert said in err.value.headline and err.value.headline.startswith("train@x: ") and "\n" not in err.value.headline
