"""Ordering units: out-of-order input in, ordered input out (K-slack, watermarks, speculation).
May import: wire.
"""
