"""PAN benchmarks, run through `pan bench ...` (see benchmarks/cli.py).

A distribution of its own (benchmarks/pyproject.toml), next to the runtime: `make` installs it
editable; a plain install of PAN has no benchmarks.
"""
