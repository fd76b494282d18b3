"""Tests of `workers`."""
