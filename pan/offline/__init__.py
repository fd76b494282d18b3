"""Offline jobs: the Spark session, its progress, and delay statistics from arrival logs.
May import: util.
"""
