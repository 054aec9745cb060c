"""Container images: images.yaml, the inputs of an image, its definition, build, identity and push.

Imports the core (profiles and workspace for the push target); never jobs,
analysis, testbed or the CLI.
"""
