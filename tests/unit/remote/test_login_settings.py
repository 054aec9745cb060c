"""The settings --remote reads: a profile's login section and params.yaml's orchestrator.login_host."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.config import params, profile
from orchestrator.config.profile_schema import Login
from orchestrator.errors import ConfigError, ProfileError


def _profile_with(tmp_path, login: dict):
    data = yaml.safe_load((profile.BUILTIN_DIR / "testbed.yaml").read_text())
    data["login"] = login
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return profile.load(str(path))


def test_the_built_in_sites_name_their_login_nodes():
    hosts = {name: profile.load(name).profile.login.host for name in ("lumi", "frontier", "juwels-booster", "testbed")}
    assert hosts == {"lumi": "lumi.csc.fi", "frontier": "frontier.olcf.ornl.gov", "juwels-booster": "juwels-booster.fz-juelich.de",
                     "testbed": None}  # fmt: skip
    assert all("${SLURM_JOB_ACCOUNT}" in profile.load(n).profile.login.root for n in ("lumi", "frontier", "juwels-booster"))


def test_a_login_section_is_read_and_checked(tmp_path):
    loaded = _profile_with(tmp_path, {"host": "me@login.example.org", "root": "/work/${USER}", "setup": ["module load x"]})
    assert loaded.profile.login == Login("me@login.example.org", "/work/${USER}", ("module load x",))
    with pytest.raises(ProfileError) as caught:
        _profile_with(tmp_path, {"host": "-oProxyCommand=x", "root": "/work/${SLURM_NODEID}/$HOME"})
    text = caught.value.render()
    assert "login.host '-oProxyCommand=x': expected [user@]host" in text
    assert "only ${NAME} references" in text and "login.root uses ${SLURM_NODEID}" in text
    with pytest.raises(ProfileError, match="login: unknown key 'hots'|hots"):
        _profile_with(tmp_path, {"hots": "x"})


def test_params_login_host_is_an_ssh_destination():
    found = params.from_data({"orchestrator": {"login_host": "my-lumi"}}, "params.yaml")
    assert found.settings.login_host == "my-lumi"
    with pytest.raises(ConfigError, match="orchestrator.login_host is 'lumi -v'; give the login node as ssh takes it"):
        params.from_data({"orchestrator": {"login_host": "lumi -v"}}, "params.yaml")
