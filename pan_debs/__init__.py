"""The DEBS 2013 Grand Challenge scenario on PAN: the soccer queries (``workers``) and their input (``simulator``).

One package, so that installing PAN adds only PAN-named packages to an environment; ``pan`` itself stays
generic and never imports this one (docs/architecture.md).
"""
