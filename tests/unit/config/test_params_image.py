"""params.yaml's orchestrator.image: none, an images.yaml entry, or the team's own .sif file."""

from __future__ import annotations

import pytest

from orchestrator.config import params
from orchestrator.errors import ConfigError
from orchestrator.util import yamlio


def settings(image):
    return params.from_data({"orchestrator": {"image": image}}, "params.yaml").settings


@pytest.mark.parametrize(
    ("image", "file"),
    [
        ("none", None),
        ("lumi", None),
        (None, None),
        ("/project/project_465000858/klajster.sif", "/project/project_465000858/klajster.sif"),
        ("images/team.sif", "images/team.sif"),
        ("../shared/team.sif", "../shared/team.sif"),
        ("team.sif", "team.sif"),
    ],
)
def test_a_value_ending_in_sif_is_an_image_file(image, file):
    assert settings(image).image_file == file


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("/project/x/team.img", "is a path, but an image file must end in .sif"),
        ("images/lumi", "is a path, but an image file must end in .sif"),
        ("$HOME/team.sif", "params values are not expanded"),
        ("/project/${SLURM_JOB_ACCOUNT}/team.sif", "params values are not expanded"),
        ("~/team.sif", "params values are not expanded"),
        ("/project/x/.sif", "has no file name before .sif"),
        ("/project/x\n/team.sif", "has a control character"),
    ],
)
def test_an_unusable_image_value_is_one_clear_error(image, why):
    with pytest.raises(ConfigError) as caught:
        settings(image)
    message = caught.value.render()
    assert message.startswith("params.yaml: orchestrator.image: ") and why in message


def test_a_cluster_overlay_can_name_its_own_image_file():
    data = {"orchestrator": {"image": "none"}, "clusters": {"lumi": {"orchestrator": {"image": "/project/p/team.sif"}}}}
    loaded = params.from_data(data, "params.yaml")
    assert loaded.settings.image_file is None
    assert loaded.for_cluster("lumi").settings.image_file == "/project/p/team.sif"
    bad = {"clusters": {"lumi": {"orchestrator": {"image": "/project/p/team.simg"}}}}
    with pytest.raises(ConfigError, match="must end in .sif"):
        params.from_data(bad, "params.yaml").for_cluster("lumi")


def test_the_digest_that_pins_an_image_file_is_named_after_it():
    assert params.digest_dep("/project/project_465000858/klajster.sif") == "containers/klajster.digest"
    assert params.digest_dep("images/team.v2.sif") == "containers/team.v2.digest"


@pytest.mark.parametrize(
    ("cluster", "example"), [("local", None), ("lumi", "project_465000858"), ("my profile.yaml", None), ("null", None)]
)
def test_the_section_init_writes_reads_back_as_settings(cluster, example):
    text = params.section_text(cluster, example)
    data = yamlio.load_text(text, "section")
    assert data == {"orchestrator": {"cluster": cluster, "account": None, "image": "none"}}
    loaded = params.from_data(data, "params.yaml").settings
    assert (loaded.cluster, loaded.account, loaded.image_file) == (cluster, None, None)
    assert (f"e.g. {example}" in text) == bool(example)
