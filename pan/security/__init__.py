"""What a workflow proves and checks: HMAC signatures and read tokens (auth), TLS certificates (tls).
May import: nothing of pan.
"""
