"""Input generation: synthetic matches, clock sync and sensor simulation."""
