"""A live web view's server: one shared subscription per stream, fanned out to browsers over WebSockets.
May import: util, security, http, repository, input.
"""
