"""`orchestrator render` on real DVC projects: the shipped pipeline, bad input, determinism.

The shipped pipeline's check and the help run in a fresh process, as users and DVC run them; the
rest in this process (support.orchestrator_here), which answers the same without each call's
second of start-up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, ROOT, invoke, make_project, orchestrator_here, require, run_orchestrator

LUMI_MASKS = "mask_cpu:0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"


def scripts(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def test_lumi_check_passes_on_the_shipped_pipeline(project):
    require("shellcheck")
    done = run_orchestrator("render", "--cluster", "lumi", "--check", cwd=project)
    assert done.returncode == 0, done.stderr
    out = project / ".orchestrator/scripts/lumi"
    files = scripts(out)
    # benchmark: 1 dataset x 2 models x 5 device configs; lm: 1 model x 2 goldfish k x 2 device configs
    assert len(files) == 10 + 4 + 3 and sum(name.startswith("lm@") for name in files) == 4  # and the corpus: tokeniser, 2 shards
    two_by_eight = [f for name, f in files.items() if b"#SBATCH --nodes=2\n" in f and name.startswith("benchmark@")]
    assert len(two_by_eight) == 2
    text = two_by_eight[0].decode()
    for line in [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --account=project_465000858",
        "#SBATCH --partition=standard-g",
    ]:
        assert line + "\n" in text
    assert f"--cpu-bind={LUMI_MASKS} bash -c orch_task" in text
    assert "--devices 8" in text and "--num-nodes 2" in text


def test_rendering_twice_is_byte_identical(project):
    assert orchestrator_here("render", "--cluster", "lumi", cwd=project).returncode == 0
    first = scripts(project / ".orchestrator/scripts/lumi")
    assert orchestrator_here("render", "--cluster", "lumi", cwd=project).returncode == 0
    assert scripts(project / ".orchestrator/scripts/lumi") == first


def test_every_builtin_cluster_renders_and_checks(project):
    require("shellcheck")
    for cluster in ["lumi", "frontier", "juwels-booster", "generic-nvidia", "testbed", "local"]:
        done = orchestrator_here("render", "--cluster", cluster, "--check", cwd=project)
        assert done.returncode == 0, (cluster, done.stderr)
    done = orchestrator_here("render", "--cluster", "testbed", "--form", "srun", "--check", "--out", "srun", cwd=project)
    assert done.returncode == 0, done.stderr


def test_default_cluster_comes_from_params(project):
    done = orchestrator_here("render", cwd=project)
    assert done.returncode == 0, done.stderr
    assert len(scripts(project / ".orchestrator/scripts/local")) == 2 + 4 + 3  # the small local default: benchmark, lm, the corpus


def test_targets_select_items(project):
    done = orchestrator_here("render", "--cluster", "lumi", "benchmark@*-device_cfg4", cwd=project)
    assert done.returncode == 0, done.stderr
    assert len(scripts(project / ".orchestrator/scripts/lumi")) == 2
    done = orchestrator_here("render", "--cluster", "lumi", "trainn", cwd=project)
    assert done.returncode == 2 and "no stage matches 'trainn'" in done.stderr and "stages: benchmark" in done.stderr


def test_overlapping_masks_fail_check_naming_the_tasks(project):
    text = (ROOT / "orchestrator/config/profiles/lumi.yaml").read_text()
    typo = text.replace(
        'gpu_cores: ["48-55", "56-63", "16-23", "24-31", "0-7", "8-15", "32-39", "40-47"]',
        "cpu_masks: [0xfe000000000000, 0xfe000000000000, 0xfe0000, 0xfe000000, 0xfe, 0xfe00, 0xfe00000000, 0xfe0000000000]",
    )
    assert typo != text
    (project / "lumi-seed.yaml").write_text(typo)
    done = orchestrator_here("render", "--cluster", "lumi-seed.yaml", "--check", cwd=project)
    assert done.returncode != 0
    assert "tasks 0 and 1 share cores 49-55" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / ".orchestrator/scripts").exists()


def assert_clean_failure(done, *expected, project):
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stderr.startswith("error: ")
    for text in expected:
        assert text in done.stderr, done.stderr
    assert not (project / ".orchestrator/scripts").exists(), "nothing may be written on failure"


def test_bad_input_gets_one_clear_message(tmp_path):
    good_params = (ROOT / "params.yaml").read_text()
    cases = {
        "malformed params": (dict(params_yaml="orchestrator: [cluster: lumi\n"), ["lumi"], ["params.yaml"]),
        "malformed dvc.yaml": (dict(dvc_yaml="stages:\n  a: {cmd: [\n"), ["lumi"], ["dvc.yaml"]),
        "unknown cluster": ({}, ["lumi-c"], ["unknown cluster 'lumi-c'", "lumi", "juwels-booster", "local"]),
        "unknown orchestrator key": (
            dict(params_yaml=good_params.replace("  account: project_465000858", "  acount: project_465000858")),
            ["lumi"],
            ["unknown key(s) acount", "valid keys: cluster, account, partition, time"],
        ),
        "too many GPUs": (
            dict(params_yaml=good_params.replace("{num_nodes: 2, num_gpus: 2}", "{num_nodes: 2, num_gpus: 16}")),
            ["testbed"],
            ["asks for 16 GPUs per node, but testbed nodes have 4"],
        ),
        "bad account": (
            dict(params_yaml=good_params.replace("account: project_465000858   #", "account: project_42   #")),
            ["lumi"],
            ["account 'project_42' does not match lumi's pattern", "project_465000858"],
        ),
        "shell syntax in a stage command": (
            dict(dvc_yaml=(ROOT / "dvc.yaml").read_text().replace("--seed ${benchmark.seed}", "--seed $(date)")),
            ["lumi"],
            ["command substitution", "single-quote interpolated values"],
        ),
    }
    for i, (files, cluster, expected) in enumerate(cases.values()):
        project = make_project(tmp_path / f"case{i}", **files)
        done = orchestrator_here("render", "--check", "--no-shellcheck", "--cluster", *cluster, cwd=project)
        assert_clean_failure(done, *expected, project=project)


def test_profile_file_with_unknown_keys(project):
    text = (ROOT / "orchestrator/config/profiles/lumi.yaml").read_text().replace("  cores: 64", "  cores: 64\n  numa: 8")
    (project / "mine.yaml").write_text(text + "extra: 1\n")
    done = orchestrator_here("render", "--cluster", "mine.yaml", cwd=project)
    assert_clean_failure(
        done, "node: unknown key(s) numa; valid keys: cores,", "(top level): unknown key(s) extra; valid keys: name,", project=project
    )


def test_all_problems_are_listed_at_once(project):
    params = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(
        params.replace("account: project_465000858   #", "account: nope   #").replace('time: "02:00:00"', 'time: "9-00:00:00"', 1)
    )
    done = orchestrator_here("render", "--cluster", "lumi", cwd=project)
    assert "account 'nope' does not match" in done.stderr
    assert "exceeds partition standard-g's limit" in done.stderr
    # one line per distinct problem, naming the items it affects
    assert done.stderr.count("does not match") == 1 and "(+7 more)" in done.stderr


def test_no_dvc_project(tmp_path):
    done = orchestrator_here("render", cwd=tmp_path)
    assert done.returncode == 2 and "no dvc.yaml in" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["--help"], ["render", "--help"], ["clusters", "show", "lumi", "--format", "yaml"]])
def test_help_and_yaml(args, tmp_path):
    done = run_orchestrator(*args, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout


def test_full_render_removes_scripts_of_items_gone_and_targets_keep_them(project):
    out = project / ".orchestrator/scripts/lumi"
    assert orchestrator_here("render", "--cluster", "lumi", cwd=project).returncode == 0
    (out / "benchmark@removed-item.sbatch").write_text("#!/bin/bash\n")
    (out / "notes.txt").write_text("mine")
    assert orchestrator_here("render", "--cluster", "lumi", "benchmark@*cfg0", cwd=project).returncode == 0
    assert (out / "benchmark@removed-item.sbatch").exists()
    assert orchestrator_here("render", "--cluster", "lumi", cwd=project).returncode == 0
    assert not (out / "benchmark@removed-item.sbatch").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert len(list(out.glob("*.sbatch"))) == 10 + 4 + 3
    assert all(oct(p.stat().st_mode & 0o777) == "0o755" for p in out.glob("*.sbatch"))


def test_orchestrated_outputs_must_persist(tmp_path):
    dvc_yaml = (ROOT / "dvc.yaml").read_text().split("    # persist:")[0] + "    outs:\n      - results/x\n"
    project = make_project(tmp_path / "p", dvc_yaml=dvc_yaml)
    done = orchestrator_here("render", cwd=project)
    assert_clean_failure(done, "declare its outputs `persist: true` (results/x)", "would delete the job's work", project=project)


def _unwritable_folders(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("x")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    return {
        "pseudo file system /proc": Path("/proc/orchestrator-test/scripts"),
        "pseudo file system /sys": Path("/sys/orchestrator-test"),
        "an existing folder of /proc": Path("/proc/self"),
        "a path through a file": tmp_path / "a-file/scripts",
        # root writes into a mode-555 folder regardless: there, a folder of /sys is read-only to it too
        "a read-only folder": read_only / "scripts" if os.geteuid() != 0 else Path("/sys/kernel"),
    }


def test_an_out_folder_that_cannot_be_written_is_one_line_and_leaves_nothing(project, tmp_path):
    for case, out in _unwritable_folders(tmp_path).items():
        done = orchestrator_here("render", "--cluster", "lumi", "--out", str(out), cwd=project)
        assert done.returncode == 2, (case, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, (case, done.stderr)
        assert done.stderr.startswith(f"error: --out {str(out)!r}: cannot write the scripts there: "), (case, done.stderr)
        assert "give --out a folder you can write" in done.stderr, case
        assert not out.exists() or out == Path("/proc/self") or out == Path("/sys/kernel"), case
    assert not (project / ".orchestrator/scripts").exists()


def test_a_failed_render_removes_the_out_folders_it_made(project):
    params = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(params.replace("account: project_465000858   #", "account: nope   #"))
    done = orchestrator_here("render", "--cluster", "lumi", "--out", "new/a/b", cwd=project)
    assert done.returncode == 2 and "account 'nope' does not match" in done.stderr
    assert not (project / "new").exists(), "an empty folder was left behind"


def test_a_full_disk_while_writing_takes_back_what_was_written(project, monkeypatch):
    import errno

    from orchestrator.scripts import matrix

    written = []

    def fill_up(path, text):
        if len(written) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        path.write_text(text)
        written.append(path)

    monkeypatch.setattr(matrix, "write_script", fill_up)
    monkeypatch.chdir(project)
    done = invoke("render", "--cluster", "lumi", "--out", "new/scripts", "--project", str(project))
    assert done.exit_code == 2 and isinstance(done.exception, SystemExit), done.output
    assert "--out 'new/scripts': cannot write the scripts there: the disk is full: " in done.output
    assert len(written) == 3 and not (project / "new").exists(), "scripts of a part of the matrix were left behind"


PARAMS = {"cluster": "local", "account": ACCOUNT, "image": "none"}
LOOK_ALIKE = """\
stages:
  s:
    matrix:
      v: ${values}
    cmd: orchestrator run -- python -c "print()" '${item.v}'
    outs:
      - out:
          persist: true
"""


def test_values_longer_than_a_file_name_render_within_the_byte_limit(tmp_path):
    values = ["x" * 5000, "é" * 200, "日本" * 100, "a b", "a_b", "a;b"]
    project = make_project(tmp_path / "p", dvc_yaml=LOOK_ALIKE, params_yaml=yaml.safe_dump({"orchestrator": PARAMS, "values": values}))
    done = orchestrator_here("render", cwd=project)
    assert done.returncode == 0, done.stderr
    written = sorted((project / ".orchestrator/scripts/local").iterdir())
    assert len(written) == len(values) and all(len(p.name.encode()) <= 200 for p in written)
    exports = [line.strip() for p in written for line in p.read_text().splitlines() if line.strip().startswith("export ORCH_ITEM=")]
    items = {
        subprocess.run(["bash", "-c", f'{e}; printf %s "$ORCH_ITEM"'], capture_output=True, text=True, check=True).stdout for e in exports
    }
    assert items == {f"s@{v}" for v in values}  # the exact name reaches the job


def test_a_value_with_a_line_break_is_refused_at_render(tmp_path):
    """DVC runs each line of a cmd as a command of its own: the value would reach bash cut in two."""
    project = make_project(
        tmp_path / "p", dvc_yaml=LOOK_ALIKE, params_yaml=yaml.safe_dump({"orchestrator": PARAMS, "values": ["a\nb", "c"]})
    )
    done = orchestrator_here("render", cwd=project)
    assert_clean_failure(done, "s@a\\nb: its cmd has a line break", "remove line breaks from the values", project=project)


NOT_ORCHESTRATED = "stages:\n  train:\n    cmd: python train.py\n  plot:\n    cmd: python plot.py > plot.txt\n"


@pytest.mark.parametrize("args", [["--check", "--no-shellcheck"], [], ["train"]])
def test_a_project_with_no_orchestrated_stage_is_told_so_and_how(tmp_path, args):
    """Before: "0 script(s) for local and checked", exit 0, on a project whose stages all run on this machine."""
    project = make_project(tmp_path / "p", dvc_yaml=NOT_ORCHESTRATED, params_yaml="orchestrator: {cluster: local}\n")
    done = invoke("render", "--project", str(project), *args)
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "runs through `orchestrator run`: there is no job script to render" in done.output
    assert "stage train: cmd `python train.py`" in done.output and "`orchestrator init --wrap STAGE`" in done.output
    assert ("stage plot:" in done.output) == (args != ["train"])  # only the stages named, when some are
    assert "0 script(s)" not in done.output and not (project / ".orchestrator/scripts").exists()


def test_a_preview_of_a_cluster_params_yaml_does_not_hold_says_so_and_names_the_switch(project):
    # The shipped params.yaml has clusters.testbed: render shows its values, which `dvc repro` would not run yet (issue 34).
    out = invoke("render", "--project", str(project), "--cluster", "testbed", "--out", str(project / "preview"))
    assert out.exit_code == 0, out.output
    assert "`orchestrator use testbed` writes them there" in out.output
    assert invoke("use", "testbed", "--project", str(project)).exit_code == 0
    switched = invoke("render", "--project", str(project), "--out", str(project / "switched"))
    assert switched.exit_code == 0 and "orchestrator use" not in switched.output, switched.output
    back = invoke("render", "--project", str(project), "--cluster", "local", "--out", str(project / "l")).output
    assert "`orchestrator use local` writes them there" in back  # local's values are kept under clusters.local now
