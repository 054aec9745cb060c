"""Training code run inside the cluster jobs (torch and Lightning; never imported by the orchestrator).

``data`` builds datasets by name, ``models`` builds networks by name, ``classifier``
is the Lightning module that trains one, ``callbacks`` report ranks and time steps,
``metrics`` writes the results file, ``plots`` logs per-step curves, and ``classify``
is the command line that ties them together for the benchmark stage of dvc.yaml.
"""
