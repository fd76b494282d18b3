"""`pan deploy` and `pan cluster`: a workflow's peers on many hosts over SSH, and hosts made of namespaces.
May import: security, config, workflow.

- ``netns``: shell helpers for network namespaces and link shaping (also used by ``pan bench network``);
- ``cluster``: a test cluster on one machine (namespaces on a bridge, each with its own sshd);
- ``inventory``: which host runs which peer, and how to reach it over SSH;
- ``ssh``: one connection per host, every failure one line;
- ``install``: the project's wheel and a wheelhouse, copied to every host and installed in a venv there;
- ``control``: up, status, logs, down and simulate on the installed hosts.
"""
