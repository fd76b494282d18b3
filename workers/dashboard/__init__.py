"""`pan dashboard`: the match and the network on one live page (issue 16).

The server side is PAN's generic live view (``pan/live/hub.py``, ``pan/live/web.py``); this package
adds what is soccer: which streams the page watches, the pitch and its drawing (``static/``).
"""
