"""A profile's site.billing: parsed into Billing, every mistake named with what is valid,
and the shipped profiles state their sites' rules with a source."""

import pytest

from orchestrator.config import profile
from orchestrator.config.profile_schema import Billing
from orchestrator.errors import ProfileError


def load_with(tmp_path, site_yaml):
    """The testbed profile (it states no billing) with a site section appended."""
    path = tmp_path / "p.yaml"
    path.write_text(profile.load("testbed").text + site_yaml)
    return profile.load(str(path)).profile


def problems_of(tmp_path, site_yaml):
    with pytest.raises(ProfileError) as err:
        load_with(tmp_path, site_yaml)
    return err.value.problems


def test_billing_is_parsed_into_a_frozen_dataclass(tmp_path):
    p = load_with(tmp_path, "site:\n  billing: {unit: GPU-hours, per_node_hour: 4, per_gpu_hour: 0.5, source: 'https://example.org'}\n")
    assert p.site.billing == Billing(unit="GPU-hours", per_node_hour=4.0, per_gpu_hour=0.5, source="https://example.org")
    assert isinstance(p.site.billing.per_node_hour, float)


def test_one_rate_is_enough(tmp_path):
    p = load_with(tmp_path, "site: {billing: {unit: node-hours, per_node_hour: 1, source: OLCF}}\n")
    assert p.site.billing.per_node_hour == 1 and p.site.billing.per_gpu_hour is None


def test_billing_is_optional():
    assert profile.load("testbed").profile.site.billing is None


def test_unknown_keys_and_wrong_types_are_named_with_the_valid_keys(tmp_path):
    found = problems_of(tmp_path, "site: {billing: {unit: GPU-hours, per_node_hour: four, per_gpu: 1, source: x}}\n")
    assert "site.billing.per_node_hour: expected float, found str 'four'" in found
    assert "site.billing: unknown key(s) per_gpu; valid keys: unit, per_node_hour, per_gpu_hour, source" in found


def test_a_boolean_rate_is_refused(tmp_path):
    found = problems_of(tmp_path, "site: {billing: {unit: GPU-hours, per_node_hour: true, source: x}}\n")
    assert found == ("site.billing.per_node_hour: expected float, found a boolean",)


def test_the_unit_is_required(tmp_path):
    assert problems_of(tmp_path, "site: {billing: {per_node_hour: 1, source: x}}\n") == ("site.billing.unit: required key missing",)


def test_a_billing_without_a_rate_says_which_rates_exist(tmp_path):
    (only,) = problems_of(tmp_path, "site: {billing: {unit: GPU-hours, source: x}}\n")
    assert only.startswith("site.billing: no rate;") and "per_node_hour" in only and "per_gpu_hour" in only


@pytest.mark.parametrize("value", ["0", "-1", ".nan", ".inf"])
@pytest.mark.parametrize("key", ["per_node_hour", "per_gpu_hour"])
def test_rates_must_be_finite_and_positive(tmp_path, key, value):
    (only,) = problems_of(tmp_path, f"site: {{billing: {{unit: GPU-hours, {key}: {value}, source: x}}}}\n")
    assert only.startswith(f"site.billing.{key} ") and "must be a finite number more than 0" in only


def test_every_meaning_problem_is_reported_at_once(tmp_path):
    found = " | ".join(problems_of(tmp_path, "site: {billing: {unit: ' ', per_node_hour: -2, per_gpu_hour: 0}}\n"))
    assert "site.billing.unit is empty" in found and "GPU-hours, node-hours or core-hours" in found
    assert "site.billing.source is empty" in found
    assert "site.billing.per_node_hour -2" in found and "site.billing.per_gpu_hour 0" in found


# --- the shipped profiles ----------------------------------------------------------------------


def test_lumi_bills_gpu_hours_with_its_source():
    b = profile.load("lumi").profile.site.billing
    assert b.unit == "GPU-hours"
    # standard-g: a whole node (4 MI250X) is 4 GPU-hours an hour; small-g: half a GPU-hour per GCD.
    assert b.per_node_hour == 4 and b.per_gpu_hour == 0.5
    assert "https://docs.lumi-supercomputer.eu/runjobs/lumi_env/billing/" in b.source


def test_lumi_node_rate_is_its_gcds_at_the_gcd_rate():
    p = profile.load("lumi").profile
    assert p.site.billing.per_node_hour == p.node.gpus * p.site.billing.per_gpu_hour


def test_frontier_bills_node_hours_with_its_source():
    b = profile.load("frontier").profile.site.billing
    assert (b.unit, b.per_node_hour, b.per_gpu_hour) == ("node-hours", 1, None)
    assert "docs.olcf.ornl.gov" in b.source


def test_juwels_booster_states_its_factor_as_an_assumption():
    b = profile.load("juwels-booster").profile.site.billing
    assert (b.unit, b.per_node_hour) == ("core-hours", 48)
    assert "fz-juelich.de" in b.source and "assumed" in b.source


@pytest.mark.parametrize("name", ["generic-nvidia", "local", "testbed"])
def test_profiles_without_a_site_billing_leave_it_unset(name):
    assert profile.load(name).profile.site.billing is None


def test_the_whole_node_partitions_of_billed_sites_have_a_node_rate():
    """A profile whose GPU partitions allocate whole nodes must state what a node-hour costs."""
    for name in profile.builtin_names():
        p = profile.load(name).profile
        if p.site.billing is None:
            continue
        for key, part in p.scheduler.partitions.items():
            if part.cpus_per_node is not None:
                continue  # another kind of node (LUMI-C's), billed from another budget
            rate = p.site.billing.per_node_hour if part.whole_node else p.site.billing.per_gpu_hour
            assert rate, f"{name}: partition {key} has no billing rate"


def test_a_partitions_automatic_flag_must_be_a_boolean(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(profile.load("testbed").text.replace("whole_node: true}", "whole_node: true, automatic: maybe}", 1))
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    assert any("automatic" in p for p in err.value.problems), err.value.problems
