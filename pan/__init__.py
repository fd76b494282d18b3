"""PAN: a pull-based peer-to-peer analysis network."""
