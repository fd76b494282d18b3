"""Small helpers every layer may use: the event loop, rate-limited logs, CPU share, console output, metrics text.
May import: nothing of pan.
"""
