"""Thin adapters from the env to trainers and env protocols (TRL, OpenEnv, verifiers).

Each submodule imports its optional library lazily; importing this package imports nothing heavy.
"""
