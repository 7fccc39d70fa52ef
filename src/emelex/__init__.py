"""emelex: a Trio-native, provider-independent LLM agent harness."""

from emelex._errors import EmelexError, LimitExceeded, SerializationError
from emelex._version import __version__

__all__ = [
    "EmelexError",
    "LimitExceeded",
    "SerializationError",
    "__version__",
]
