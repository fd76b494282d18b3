"""Starting and stopping processes: the launcher of a workflow's peers, lifelines, owned child processes.
May import: security, config.
"""
