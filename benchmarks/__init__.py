"""PAN benchmarks, run through `pan bench ...` (see benchmarks/cli.py)."""
