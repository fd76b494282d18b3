"""DEBS 2013 Grand Challenge components for PAN (registered through ``workers.components``)."""
