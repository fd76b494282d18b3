"""Subcommands of the `pan` CLI, one module per group.
May import: util, security, http, wire, repository, input, config, workflow, worker, launch, deploy, offline.
"""
