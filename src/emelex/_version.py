"""The single version string of emelex (read by the build backend too)."""

__version__ = "0.1.0"
