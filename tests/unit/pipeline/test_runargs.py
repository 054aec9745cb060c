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
