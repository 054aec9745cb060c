"""Running the build job on the login node (orchestrator/containers/build_job.py) against a fake
Slurm whose "job" is a build with a fake runtime: up to date, nothing is submitted; stale, one
job, its output streamed, its id recorded beside the image, the digest written; a job of the
image still running is followed, not doubled; a failed job is one message naming it, its state
and its output file; a refused sbatch records nothing."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
from pathlib import Path

import pytest
from fakes import FakeClock, FakeRunner, ok

from orchestrator.config import profile
from orchestrator.config.profile_schema import ContainerBuild
from orchestrator.containers import build, build_job, images, on_cluster
from orchestrator.containers.images import BuildError, ContainerError
from orchestrator.util.runner import Completed

SACCT = "{id}|{state}|{code}|3|1|node1|None\n"


def fake_runtime() -> FakeRunner:
    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(b"SIF bytes")
        return Completed(tuple(argv), 0, "", "")

    return FakeRunner(answers={"apptainer": fake_build, "git": ok("", rc=128)}, installed={"apptainer"})


@dataclasses.dataclass
class Cluster:
    """A fake Slurm: sbatch "runs" the job at once (a build into the target, or a failure), squeue
    holds it for ``running`` looks, then sacct says how it ended."""

    project: Path
    job: on_cluster.BuildJob
    fails: bool = False
    running: int = 1
    ids: itertools.count = dataclasses.field(default_factory=lambda: itertools.count(100))
    runner: FakeRunner = dataclasses.field(init=False)
    ended: dict[str, str] = dataclasses.field(default_factory=dict)  # id -> sacct state
    queued: dict[str, int] = dataclasses.field(default_factory=dict)  # id -> looks left in squeue

    def __post_init__(self):
        self.runner = FakeRunner(answers={"sbatch": self.sbatch, "squeue": self.squeue, "sacct": self.sacct})

    def run_job(self, job_id: str) -> None:
        out = self.project / self.job.output_of(job_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("tiny: building\n")
        if self.fails:
            out.write_text("tiny: building\nFATAL: no space left\n")
            self.ended[job_id] = "FAILED|1:0"
            return
        build.build(self.project, "tiny", fake_runtime(), output=Path(self.job.target), digest_file=self.project / "job.digest")
        with out.open("a") as f:
            f.write("tiny: built\n")
        self.ended[job_id] = "COMPLETED|0:0"

    def sbatch(self, argv):
        job_id = str(next(self.ids))
        self.queued[job_id] = self.running
        return Completed(tuple(argv), 0, f"{job_id}\n", "")

    def squeue(self, argv):
        """RUNNING while looks are left; then the job "runs" (once) and Slurm forgets it."""
        job_id = argv[argv.index("-j") + 1]
        if self.queued.get(job_id, 0) > 0:
            self.queued[job_id] -= 1
            return Completed(tuple(argv), 0, f"{job_id}|RUNNING|0:05|1|node1|None\n", "")
        if job_id in self.queued and job_id not in self.ended:
            self.run_job(job_id)
        return Completed(tuple(argv), 0, "", "")

    def sacct(self, argv):
        job_id = argv[argv.index("-j") + 1]
        if job_id not in self.ended:
            return Completed(tuple(argv), 0, "", "")
        state, code = self.ended[job_id].split("|")
        return Completed(tuple(argv), 0, SACCT.format(id=job_id, state=state, code=code), "")


@pytest.fixture
def setup(tiny, tmp_path):
    p = profile.load("testbed").profile
    p = dataclasses.replace(p, container=dataclasses.replace(p.container, runtime="apptainer", build=ContainerBuild(partition="debug")))
    target = tmp_path / "shared" / "tiny.sif"
    digest = tiny / "containers" / "tiny.digest"
    job = on_cluster.plan(p, "tiny", str(target), str(tiny), ["/venv/bin/orchestrator"], None, str(digest))
    return tiny, job, digest


def run(project, job, digest, cluster, force=False, clock=None):
    said, out = [], []
    image = images.select(project, "tiny")
    clock = clock or FakeClock()
    done = build_job.build_in_job(project, image, job, digest, cluster.runner, force=force, say=said.append, out=out.append, clock=clock)
    return done, said, "".join(out)


def test_stale_one_job_streamed_recorded_and_the_digest_written(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    done, said, out = run(project, job, digest, cluster)
    assert done.job_id == "100" and not done.followed
    assert len(cluster.runner.called("sbatch")) == 1
    sbatch = cluster.runner.called("sbatch")[0]
    assert sbatch[2] == f"--chdir={project}" and sbatch[-1] == str(project / ".orchestrator/images/tiny.build.sbatch")
    assert "#SBATCH --job-name=orchestrator-build-tiny" in Path(sbatch[-1]).read_text()
    assert out == "tiny: building\ntiny: built\n"  # the job's output file, streamed
    assert on_cluster.job_file(Path(job.target)).read_text() == "100\n"
    assert digest.read_text() == f"{done.content_hash}\n" == (project / "job.digest").read_text()
    assert any("building (no image yet) in Slurm job 100 on partition debug" in line for line in said), said


def test_up_to_date_submits_nothing_and_writes_the_digest(setup):
    project, job, digest = setup
    build.build(project, "tiny", fake_runtime(), output=Path(job.target), digest_file=project / "elsewhere.digest")
    cluster = Cluster(project, job)
    done, _, _ = run(project, job, digest, cluster)
    assert done.job_id is None and cluster.runner.calls == []
    assert digest.read_text() == (project / "elsewhere.digest").read_text()


def test_forced_it_submits_although_up_to_date(setup):
    project, job, digest = setup
    build.build(project, "tiny", fake_runtime(), output=Path(job.target), digest_file=project / "elsewhere.digest")
    cluster = Cluster(project, job)
    done, _, _ = run(project, job, digest, cluster, force=True)
    assert done.job_id == "100" and len(cluster.runner.called("sbatch")) == 1


def test_a_running_job_of_the_image_is_followed_not_doubled(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    on_cluster.job_file(Path(job.target)).parent.mkdir(parents=True)
    on_cluster.job_file(Path(job.target)).write_text("77\n")
    cluster.queued["77"] = 2  # running: seen by the check before submitting, and by the first look
    done, said, out = run(project, job, digest, cluster)
    assert done.job_id == "77" and done.followed and cluster.runner.called("sbatch") == []
    assert out == "tiny: building\ntiny: built\n"
    assert any("build job 77 of this image is running: following it" in line for line in said), said
    assert digest.read_text() == f"{done.content_hash}\n"


def test_an_ended_recorded_job_is_not_followed(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    on_cluster.job_file(Path(job.target)).parent.mkdir(parents=True)
    on_cluster.job_file(Path(job.target)).write_text("77\n")  # squeue no longer knows it
    done, _, _ = run(project, job, digest, cluster)
    assert done.job_id == "100" and len(cluster.runner.called("sbatch")) == 1


def test_a_failed_job_is_one_message_with_its_state_and_output(setup):
    project, job, digest = setup
    cluster = Cluster(project, job, fails=True)
    with pytest.raises(BuildError) as err:
        run(project, job, digest, cluster)
    assert err.value.exit_code == 1
    assert err.value.headline == "build job 100 (orchestrator-build-tiny) of image 'tiny' ended FAILED, exit 1"
    assert f"its output: {project / '.orchestrator/images/tiny.build-job-100.out'}" in err.value.hints
    assert not digest.exists() and not Path(job.target).exists()


def test_a_refused_sbatch_records_nothing(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    cluster.runner.answers["sbatch"] = ok("", "sbatch: error: invalid partition specified: debug\n", rc=1)
    with pytest.raises(ContainerError, match="sbatch refused the build job") as err:
        run(project, job, digest, cluster)
    assert "sbatch: error: invalid partition specified: debug" in err.value.hints
    assert not on_cluster.job_file(Path(job.target)).exists() and not digest.exists()


# Slurm's own words when the controller and the database are down (as the testbed prints them).
SQUEUE_DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
SACCT_DOWN = "sacct: error: Problem talking to the database: Connection refused\n"


def outage(cluster: Cluster, looks: int, squeue_times_out: bool = False) -> None:
    """For the next ``looks`` queries neither sacct nor squeue answers (squeue by failing, or by not
    answering in time); then Slurm answers again, as before."""
    left = {"sacct": looks, "squeue": looks}
    answer = {"sacct": cluster.sacct, "squeue": cluster.squeue}

    def down(name):
        def run(argv):
            if left[name] > 0:
                left[name] -= 1
                if name == "squeue" and squeue_times_out:
                    raise subprocess.TimeoutExpired(argv, 60)
                return Completed(tuple(argv), 1, "", SQUEUE_DOWN if name == "squeue" else SACCT_DOWN)
            return answer[name](argv)

        return run

    cluster.runner.answers.update(sacct=down("sacct"), squeue=down("squeue"))


def test_a_controller_outage_while_following_is_waited_out_not_an_unknown_end(setup):
    """Slurm silent for far longer than the wait for a lagging database (60 s): still following, said once."""
    project, job, digest = setup
    cluster = Cluster(project, job, running=2)
    on_cluster.job_file(Path(job.target)).parent.mkdir(parents=True)
    on_cluster.job_file(Path(job.target)).write_text("77\n")
    cluster.queued["77"] = 2  # running: seen before submitting and at the first look, then Slurm goes silent
    clock = FakeClock()
    checked = cluster.runner.answers["squeue"]

    def first_look_then_down(argv):
        done = checked(argv)
        if "77|RUNNING" in done.stdout and cluster.queued["77"] == 0:
            outage(cluster, looks=40)
        return done

    cluster.runner.answers["squeue"] = first_look_then_down
    done, said, out = run(project, job, digest, cluster, clock=clock)
    assert done.job_id == "77" and cluster.runner.called("sbatch") == []
    assert clock.t - 1000 > 2 * build_job.SACCT_WAIT_S  # the outage lasted well beyond it
    silent = [line for line in said if "cannot ask Slurm about build job 77" in line]
    assert len(silent) == 1 and "sacct and squeue both failed: sacct: error: Problem talking to the database" in silent[0], said
    assert "still waiting for it" in silent[0]
    assert any("Slurm answers again: following build job 77" in line for line in said), said
    assert out == "tiny: building\ntiny: built\n" and digest.read_text() == f"{done.content_hash}\n"


def test_a_squeue_timeout_while_following_is_a_message_not_a_traceback(setup):
    project, job, digest = setup
    cluster = Cluster(project, job, running=0)
    outage(cluster, looks=3, squeue_times_out=True)
    cluster.runner.answers["sacct"] = cluster.sacct  # the database answers: it does not list the job yet
    done, said, _ = run(project, job, digest, cluster)
    assert done.job_id == "100"
    # sacct answered (nothing yet) while squeue timed out: the database's word stands, nothing to say.
    assert not any("cannot ask Slurm" in line for line in said), said


def test_a_squeue_timeout_with_the_database_down_is_a_message_and_the_job_is_followed(setup):
    project, job, digest = setup
    cluster = Cluster(project, job, running=0)
    outage(cluster, looks=3, squeue_times_out=True)
    done, said, _ = run(project, job, digest, cluster)
    assert done.job_id == "100"
    (silent,) = [line for line in said if "cannot ask Slurm about build job 100" in line]
    why = "squeue did not answer within 60 s: is the Slurm controller up?"
    assert silent == f"tiny: cannot ask Slurm about build job 100 ({why}); still waiting for it"


def test_a_recorded_job_slurm_cannot_be_asked_about_submits_nothing(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    on_cluster.job_file(Path(job.target)).parent.mkdir(parents=True)
    on_cluster.job_file(Path(job.target)).write_text("77\n")
    outage(cluster, looks=1)
    with pytest.raises(ContainerError) as err:
        run(project, job, digest, cluster)
    assert err.value.headline.startswith("cannot tell whether build job 77 of image 'tiny' still runs: sacct and squeue both failed")
    assert err.value.headline.endswith("nothing was submitted") and cluster.runner.called("sbatch") == []


def test_a_job_neither_squeue_nor_sacct_ever_knows_ends_unknown_after_the_database_wait(setup):
    project, job, digest = setup
    cluster = Cluster(project, job)
    cluster.runner.answers["sbatch"] = ok("555\n")  # a job the fake Slurm never heard of
    clock = FakeClock()
    with pytest.raises(BuildError, match=r"build job 555 .* ended an unknown state \(neither squeue nor sacct knows it\)"):
        run(project, job, digest, cluster, clock=clock)
    assert build_job.SACCT_WAIT_S <= clock.t - 1000 <= build_job.SACCT_WAIT_S + 10
