"""A worker's state on disk: checkpoint files, written atomically and checked whole before they are loaded.
May import: nothing of pan.
"""
