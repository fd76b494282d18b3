"""The HTTP server every PAN endpoint runs on: limits, the JSON error contract, content negotiation, HTML pages.
May import: util, security.
"""
