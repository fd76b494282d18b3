"""Workflow files: parsing and validation, checks before a start, health of a running workflow, service discovery.
May import: security, http, buffers, repository, ingest, config, components.
"""
