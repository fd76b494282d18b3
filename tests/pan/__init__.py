"""Tests of `pan`."""
