"""Data entering PAN over TCP: the ingest server, its row decoders and the schemas rows are checked against.
May import: util, wire, ordering, buffers.
"""
