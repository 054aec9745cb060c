"""Property-based: images.yaml's names become file names (.orchestrator/images/NAME.sif,
containers/NAME.digest, the build job's script and log) and command-line words. Whatever a key
of images.yaml is, the images it yields are names that stay in those folders, or the file is
refused with one ContainerError that lists the valid ones."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

from orchestrator.containers import catalog, images
from orchestrator.containers.images import ContainerError

TRICKY = "./\\-_:@ ~$*\n\t\x00é日"
KEYS = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.text(st.sampled_from(TRICKY + "ab1"), min_size=1, max_size=12),
    st.sampled_from(["..", ".", "", "-", "--help", "a/../..", "/etc/passwd", "ci", "a" * 101, "a" * 100]),
    st.integers(),
    st.booleans(),
    st.none(),
)


@given(keys=st.lists(KEYS, min_size=1, max_size=5, unique_by=lambda k: (type(k), k)))
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_image_name_stays_in_its_folders_or_the_file_is_refused(tmp_path_factory, keys):
    project = tmp_path_factory.mktemp("names")
    (project / "containers").mkdir()
    try:
        text = yaml.safe_dump({key: {"definition": "x.def.j2"} for key in keys})
    except yaml.YAMLError:
        return
    (project / "containers/images.yaml").write_text(text)
    try:
        names = images.names(project)
    except ContainerError as exc:
        message = exc.render()
        assert exc.exit_code == 2 and "invalid image names" in message and "valid images: " in message
        return
    loaded = yaml.safe_load(text)
    assert sorted(loaded) == names  # nothing left out in silence
    folders = (catalog.images_folder(project), project / images.CONTAINERS_DIR)
    for name in names:
        assert isinstance(name, str) and not name.startswith("-")  # never an option where it is passed on
        for folder, suffix in zip(folders, (".sif", ".digest"), strict=True):
            assert Path(os.path.normpath(folder / f"{name}{suffix}")).parent == folder, name
