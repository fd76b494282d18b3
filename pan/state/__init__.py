"""A worker's state on disk: checkpoints it restores after a crash (docs/reliability.md, "Checkpoints")."""
