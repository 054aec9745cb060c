"""A project as a whole: bringing an existing DVC project under the orchestrator (``orchestrator init``).

Touches the project's own files (params.yaml, the ignore files, containers/images.yaml,
dvc.yaml). Imports the core and :mod:`orchestrator.containers` (the images.yaml skeleton);
never jobs, remote, analysis, testbed or the CLI.
"""
