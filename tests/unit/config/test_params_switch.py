"""Switching params.yaml to a cluster: what `orchestrator use` writes, and the guard that refuses the rest."""

from __future__ import annotations

import pytest

from orchestrator.config import params
from orchestrator.errors import ConfigError

BASE = {
    "orchestrator": {"cluster": "local", "account": "p1", "image": "none"},
    "lm": {"models": ["tiny"], "steps": 30, "cfgs": [{"n": 1}]},
    "clusters": {
        "lumi": {"orchestrator": {"image": "lumi"}, "lm": {"models": ["large"], "steps": 2000}},
        "frontier": {"orchestrator": {"account": "abc"}, "lm": {"cfgs": [{"n": 8}]}},
    },
}


def prm(data) -> params.Params:
    return params.from_data(data, "params.yaml")


def applied(data, sw: params.Switch) -> dict:
    out = {**sw.top, "clusters": dict(data["clusters"])}
    if sw.kept is not None:
        out["clusters"][params.HOME] = sw.kept
    return out


def test_switch_writes_the_overlay_and_keeps_what_it_replaced():
    sw = params.switch(prm(BASE), "lumi")
    assert sw.top["lm"] == {"models": ["large"], "steps": 2000, "cfgs": [{"n": 1}]}
    assert sw.top["orchestrator"] == {"cluster": "lumi", "account": "p1", "image": "lumi"}
    assert sw.kept == {"orchestrator": {"image": "none"}, "lm": {"models": ["tiny"], "steps": 30}}


def test_switching_around_comes_back_to_the_base():
    on_lumi = applied(BASE, params.switch(prm(BASE), "lumi"))
    on_frontier = applied(on_lumi, params.switch(prm(on_lumi), "frontier"))
    # lumi's values are gone on frontier: only frontier's differ from the base
    assert on_frontier["lm"] == {"models": ["tiny"], "steps": 30, "cfgs": [{"n": 8}]}
    assert on_frontier["orchestrator"] == {"cluster": "frontier", "account": "abc", "image": "none"}
    home = applied(on_frontier, params.switch(prm(on_frontier), "local"))
    assert {k: v for k, v in home.items() if k != "clusters"} == {k: v for k, v in BASE.items() if k != "clusters"}
    # and switching to the cluster already switched to changes nothing
    again = params.switch(prm(home), "local")
    assert again.changes(prm(home)) == [] and again.kept is None


def test_edits_made_on_local_are_kept_when_leaving_it():
    on_lumi = applied(BASE, params.switch(prm(BASE), "lumi"))
    home = applied(on_lumi, params.switch(prm(on_lumi), "local"))
    home["lm"]["models"] = ["tiny", "small"]  # edited by hand while local is active
    params.require_switched(prm(home), "local", "run")  # local's values are params.yaml's own
    back = applied(home, params.switch(prm(home), "lumi"))
    assert back["clusters"]["local"]["lm"]["models"] == ["tiny", "small"]


def test_guard_refuses_a_cluster_named_without_its_values():
    data = {**BASE, "orchestrator": {**BASE["orchestrator"], "cluster": "lumi"}}  # set by hand, or dvc exp run -S
    with pytest.raises(ConfigError) as err:
        params.require_switched(prm(data), "lumi", "run")
    text = err.value.render()
    assert 'lm.models: ["tiny"] here, ["large"] on lumi' in text
    assert "`orchestrator use lumi`" in text and "orchestrator exp run --cluster lumi" in text


def test_guard_refuses_another_cluster_than_the_values_are_for():
    on_lumi = applied(BASE, params.switch(prm(BASE), "lumi"))
    params.require_switched(prm(on_lumi), "lumi", "run")
    with pytest.raises(ConfigError, match="orchestrator use local"):
        params.require_switched(prm(on_lumi), "local", "submitted")
    # a cluster without an entry runs the base's values: refused on lumi's, allowed on the base
    with pytest.raises(ConfigError, match="orchestrator use testbed"):
        params.require_switched(prm(on_lumi), "testbed", "submitted")
    params.require_switched(prm(BASE), "testbed", "submitted")


def test_overlay_for_previews_the_switch():
    data = {**BASE, "orchestrator": {**BASE["orchestrator"], "cluster": "lumi"}}
    assert prm(data).for_cluster("lumi").data["lm"]["models"] == ["large"]  # render shows what `use` will write
    assert prm(BASE).overlay_for("local") == {}


def test_an_entry_for_no_known_cluster_is_refused():
    data = {**BASE, "clusters": {**BASE["clusters"], "lumii": {"orchestrator": {}}}}
    with pytest.raises(ConfigError, match="no known cluster: lumii") as err:
        params.switch(prm(data), "lumi")
    assert "lumi" in err.value.render() and "profile file" in err.value.render()


def test_a_value_of_another_type_is_refused():
    data = {**BASE, "clusters": {"lumi": {"orchestrator": {}, "lm": {"steps": "2000", "models": "large"}}}}
    with pytest.raises(ConfigError) as err:
        params.switch(prm(data), "lumi")
    assert len(err.value.problems) == 2
    assert "clusters.lumi.lm.steps is text '2000', but lm.steps is a number 30" in err.value.render()


def test_a_setting_of_the_wrong_type_is_refused():
    data = {**BASE, "clusters": {"lumi": {"orchestrator": {"array_parallel": 0}}}}
    with pytest.raises(ConfigError, match="array_parallel"):
        params.switch(prm(data), "lumi")


def test_a_value_the_base_lacks_cannot_be_put_back():
    data = {**BASE, "clusters": {"lumi": {"orchestrator": {"login_host": "lumi"}, "extra": {"x": 1}}}}
    with pytest.raises(ConfigError, match="extra.x is set per cluster but not in params.yaml itself"):
        params.switch(prm(data), "lumi")
    # an orchestrator setting absent from the base is kept as its default
    ok = {**BASE, "clusters": {"lumi": {"orchestrator": {"login_host": "lumi", "read_in_place": ["d"]}}}}
    assert params.switch(prm(ok), "lumi").kept == {"orchestrator": {"login_host": None, "read_in_place": []}}


def test_a_profile_file_finds_the_entry_of_the_name_it_gives(tmp_path, monkeypatch):
    from orchestrator.config import profile

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text((profile.BUILTIN_DIR / "lumi.yaml").read_text())
    assert prm(BASE).overlay_key("mine.yaml") == "lumi"
    with pytest.raises(ConfigError, match="orchestrator use mine.yaml"):
        params.require_switched(prm(BASE), "mine.yaml", "run")


def test_dvc_sets_are_hydra_overrides():
    sets = params.dvc_sets(prm(BASE), "frontier")
    assert sets == ["orchestrator.cluster=frontier", "orchestrator.account=abc", "lm.cfgs=[{n:8}]"]
    assert params._hydra({"a": 'x"y', "b": [1, None, True, "04:00:00", "true"]}) == '{a:"x\\"y",b:[1,null,true,"04:00:00","true"]}'
