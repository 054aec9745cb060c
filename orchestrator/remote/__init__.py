"""The job commands from a workstation: run them on the cluster's login node over SSH.

``orchestrator submit --remote`` (and ``status``, ``logs``, ``cancel``, ``show``) sends the
workspace's committed state to a per-project folder on the cluster (:mod:`sync` here,
:mod:`checkout` there), then runs the same ``orchestrator`` command in that folder
(:mod:`session`) and streams its output back. Everything goes through the system's
``ssh`` (:mod:`connection`): the user's ``~/.ssh/config`` (aliases, ProxyJump, keys,
agents) applies as it does to a plain ``ssh HOST``, and one master connection
(ControlMaster) serves a whole session, so a two-factor login is asked once. Where the
login node and the folder come from: :mod:`destination`.

Why the command runs THERE rather than driving sbatch/sacct over ssh from here: the
ledger that decides what was submitted (``.orchestrator/``), DVC's view of what is
stale, and the outputs all live beside the jobs; running there keeps one source of
truth, so a connection lost after ``sbatch`` cannot make a second submission: the
remote command was detached and finishes alone, and the next call reads its ledger.

Imports: the core (util, config) only. The cluster's side of a sync (:mod:`checkout`)
runs in the same package on the login node, as ``orchestrator remote checkout``.
"""
