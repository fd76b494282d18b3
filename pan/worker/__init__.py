"""A worker and its HTTP API, and the peer process that hosts several workers in one event loop.
May import: util, security, http, wire, buffers, repository, input, config, components, ordering, state.
"""
