"""Where a stream's tuples live: ring buffers, column buffers, row stores and the output stream.
May import: wire.
"""
