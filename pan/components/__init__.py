"""The code between inputs and outputs: the Component base, the catalogue, ordered and built-in components.
May import: util, wire, ordering, buffers, input, ingest, config, state.
"""
