"""The input side of a worker: subscription state, page fetchers and batches, the subscriber, input channels.
May import: util, security, http, wire, buffers, repository.
"""
