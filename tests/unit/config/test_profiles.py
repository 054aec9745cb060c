"""Cluster profiles: built-ins load, files round-trip, bad files get clear messages; the
device power and site figures (PUE, carbon intensity); no secret values in a profile."""

import textwrap

import pytest
import yaml
from support import ROOT

from orchestrator.config import profile, profile_checks
from orchestrator.errors import ConfigError, ProfileError

REQUIRED = {"lumi", "juwels-booster", "frontier", "generic-nvidia", "local", "testbed"}


def test_required_builtins_exist_and_are_valid():
    assert REQUIRED <= set(profile.builtin_names())
    for name in profile.builtin_names():
        loaded = profile.load(name)
        assert loaded.name == name
        assert profile_checks.problems(loaded.profile) == []


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_yaml_text_loads_back_as_the_same_profile(tmp_path, name):
    loaded = profile.load(name)
    copy = tmp_path / f"{name}-copy.yaml"
    copy.write_text(loaded.text)
    again = profile.load(str(copy))
    assert again.profile == loaded.profile
    assert again.source == str(copy)


def test_unknown_cluster_lists_the_builtins():
    with pytest.raises(ProfileError) as err:
        profile.load("lumi-c")
    text = err.value.render()
    assert "unknown cluster 'lumi-c'" in text
    for name in REQUIRED:
        assert name in text


def write(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


MINIMAL = """\
name: mine
description: test
scheduler:
  kind: slurm
  default_partition: gpu
  partitions:
    gpu: {max_nodes: 2, max_time: "01:00:00", whole_node: true}
node:
  cores: 16
  gpus: 2
  gpu_cores: ["0-7", "8-15"]
"""


def test_minimal_profile_file(tmp_path):
    p = profile.load(write(tmp_path, MINIMAL)).profile
    assert p.node.binding(2).masks == ("0xff", "0xff00")


def test_unknown_keys_are_named_with_the_valid_ones(tmp_path):
    text = MINIMAL.replace("  cores: 16", "  cores: 16\n  cpu_mask: [0x1]\n  sockets: 2") + "storge: {}\n"
    with pytest.raises(ConfigError) as err:
        profile.load(write(tmp_path, text))
    message = err.value.render()
    assert "node: unknown key(s) cpu_mask, sockets; valid keys: cores, threads_per_core" in message
    assert "cpu_masks" in message  # the key the user probably meant is among the valid ones
    assert "(top level): unknown key(s) storge" in message


def test_wrong_types_and_meanings_are_all_reported(tmp_path):
    text = (
        MINIMAL.replace("cores: 16", "cores: sixteen")
        .replace("default_partition: gpu", "default_partition: gpu\n  default_time: soon")
        .replace("whole_node: true", "whole_node: maybe")
    )
    with pytest.raises(ConfigError) as err:
        profile.load(write(tmp_path, text))
    problems = err.value.problems
    assert any(p.startswith("node.cores: expected int") for p in problems)
    assert any("whole_node: expected bool" in p for p in problems)


def test_semantic_problems(tmp_path):
    text = MINIMAL.replace("default_partition: gpu", "default_partition: cpu\n  default_time: soon").replace(
        'gpu_cores: ["0-7", "8-15"]', 'gpu_cores: ["0-7"]\n  reserved_cores: "99"'
    )
    with pytest.raises(ProfileError) as err:
        profile.load(write(tmp_path, text))
    problems = " | ".join(err.value.problems)
    assert "default_partition 'cpu' is not one of: gpu" in problems
    assert "'soon' is not a Slurm time" in problems
    assert "1 entr(ies) for 2 GPU(s)" in problems
    assert "reserved_cores '99' names cores beyond" in problems


def test_runtime_templates_may_not_run_commands(tmp_path):
    text = MINIMAL + "environment:\n  variables:\n    CACHE: /tmp/$(whoami)\n"
    with pytest.raises(ProfileError) as err:
        profile.load(write(tmp_path, text))
    assert "environment.variables.CACHE" in err.value.render()


def test_malformed_yaml_names_the_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        profile.load(write(tmp_path, "name: x\nnode: {cores: 2\n"))
    assert "is not valid YAML at line" in err.value.render()


def test_explicit_masks_are_parsed_hex(tmp_path):
    text = MINIMAL.replace('gpu_cores: ["0-7", "8-15"]', "cpu_masks: [0xff, '0xff00']")
    p = profile.load(write(tmp_path, text)).profile
    assert p.node.binding(2).masks == ("0xff", "0xff00")


# --- device power and site figures -------------------------------------------------------------


@pytest.mark.parametrize("name", ["lumi", "frontier", "juwels-booster", "generic-nvidia"])
def test_gpu_profiles_carry_power_and_site_with_sources(name):
    p = profile.load(name).profile
    assert p.node.gpu.power_w and p.node.gpu.peak_tflops_bf16
    assert p.site.pue >= 1 and p.site.carbon_intensity_g_per_kwh >= 0 and p.site.source


def test_lumi_site_is_hydro_with_a_low_pue():
    site = profile.load("lumi").profile.site
    assert 1.0 <= site.pue <= 1.05 and site.carbon_intensity_g_per_kwh <= 30


def test_bad_site_values_are_reported(tmp_path):
    text = profile.load("testbed").text + "site: {pue: 0.9, carbon_intensity_g_per_kwh: -1}\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    assert "site.pue 0.9" in err.value.render() and "carbon_intensity_g_per_kwh -1" in err.value.render()


# --- secrets are passed by name, never held ----------------------------------------------------


def test_a_profile_may_not_hold_a_secret_value(tmp_path):
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["environment"]["variables"]["WANDB_API_KEY"] = "abc123"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    assert "environment.variables.WANDB_API_KEY: looks like a secret" in str(err.value) and "orchestrator.secrets" in str(err.value)


# --- where processes run, and torch.compile's caches --------------------------------------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("processes_on: tpu", "processes_on"),
        ("processes_on: gpu\n  gpus: 0", "node.processes_on is gpu, but node.gpus is 0"),
    ],
)
def test_bad_processes_on_is_named(tmp_path, change, fragment):
    text = profile.load("testbed").text.replace("processes_on: cpu", change)
    if "gpus: 0" in change:
        text = text.replace("  gpus: 4\n", "").replace('  gpu_cores: ["0", "1", "2", "3"]\n', "")
    with pytest.raises((ProfileError, ConfigError)) as err:
        profile.load(write(tmp_path, text))
    assert fragment in err.value.render()


def test_a_compile_cache_that_runs_a_command_is_refused(tmp_path):
    text = profile.load("testbed").text + "storage: {compile_cache: /tmp/$(whoami)}\n"
    text = text.replace("storage:\n  workdir_root: /tmp/orchestrator-testbed/${USER}\n", "")
    with pytest.raises(ProfileError) as err:
        profile.load(write(tmp_path, text))
    assert "storage.compile_cache" in err.value.render()


# --- CPU jobs: the partition they run on -------------------------------------------------------


def test_builtin_cpu_partitions():
    """LUMI-C's `small` for lumi (its nodes counted apart from LUMI-G's), the testbed's one
    partition; none on the GPU-only clusters, and none without Slurm."""
    lumi = profile.load("lumi").profile.scheduler
    assert lumi.cpu_partition == "small"
    small = lumi.partitions["small"]
    assert (small.max_nodes, small.max_time, small.whole_node, small.cpus_per_node) == (4, "3-00:00:00", False, 256)
    assert profile.load("testbed").profile.scheduler.cpu_partition == "debug"
    for name in ["frontier", "juwels-booster", "generic-nvidia", "local"]:
        assert profile.load(name).profile.scheduler.cpu_partition is None, name


def test_usable_cpus_leave_out_the_reserved_cores_and_their_threads():
    assert profile.load("lumi").profile.node.usable_cpus == 112  # 56 cores x 2 threads: low-noise mode keeps 8
    assert profile.load("testbed").profile.node.usable_cpus == 8


def test_cpu_partition_must_be_a_listed_partition(tmp_path):
    text = MINIMAL.replace("default_partition: gpu", "default_partition: gpu\n  cpu_partition: cpu").replace(
        "whole_node: true}", 'whole_node: true}\n    small: {max_nodes: 1, max_time: "01:00:00", cpus_per_node: 0}'
    )
    with pytest.raises(ProfileError) as err:
        profile.load(write(tmp_path, text))
    problems = err.value.problems
    assert "scheduler.cpu_partition 'cpu' is not one of: gpu, small" in problems
    assert "scheduler.partitions.small.cpus_per_node must be at least 1 (leave it out for the profile's node)" in problems


def test_cpu_partition_needs_slurm(tmp_path):
    text = profile.load("local").text.replace("  launcher: local\n", "  launcher: local\n  cpu_partition: small\n")
    with pytest.raises(ProfileError) as err:
        profile.load(write(tmp_path, text))
    assert err.value.problems == ("scheduler.cpu_partition: a profile without Slurm (kind: none) has no partitions; leave it out",)
