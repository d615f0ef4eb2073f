"""gpupred's version, on its own so that any module can record it without importing the package's public face."""

__version__ = "0.1.0"
