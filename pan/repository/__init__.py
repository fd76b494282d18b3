"""The publish/subscribe repository: its server, and the client that leases, looks up and waits.
May import: util, security, http.
"""
