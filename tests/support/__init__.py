"""Helpers shared by the tests: builders, feeds, live servers, grammars."""
