"""The package version, in a module of its own so that capture/ can write it into meta.json without
importing the package root (whose `profile()` imports the notebook layer above capture)."""

__version__ = "0.1.0"
