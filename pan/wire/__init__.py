"""The wire formats: a page's progress meta, JSON, Arrow and line pages, integer CSV, the /data query.
May import: http.
"""
