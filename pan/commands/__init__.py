"""Subcommands of the `pan` CLI, one module per group."""
