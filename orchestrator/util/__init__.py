"""Shared utilities: running processes, atomic files, hashing, locks, YAML, git, the ssh transport, text patterns.

Owns nothing about clusters, pipelines or jobs; imports only the standard
library, third-party packages and :mod:`orchestrator.errors`.
"""
