"""Which cluster profile applies (orchestrator/config/selection.py): detected from the scheduler, or named."""

from fakes import FakeRunner, fake_slurm, ok


def test_cluster_detection(testbed_project):
    from orchestrator.config import params, selection

    prm = params.Params(data={}, settings=params.Settings(cluster="auto"))
    assert selection.select_cluster(None, prm, fake_slurm()) == "testbed"
    assert selection.select_cluster("lumi", prm, fake_slurm()) == "lumi"
    assert selection.select_cluster(None, prm, FakeRunner(installed=set())) == "local"
    assert selection.select_cluster(None, prm, fake_slurm(scontrol=ok("ClusterName = elsewhere\n"))) == "local"
