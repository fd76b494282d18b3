"""Timestamps are integer picoseconds: how many make a millisecond and a second.

Apart so that what only converts times (pan/ingest, the settings) need not import an ordering unit.
"""

PS_PER_MS = 10**9
PS_PER_S = 10**12
