"""The wire version: bumped when a declaration changes incompatibly."""

from typing import Final

#: Clients send it and the Host refuses a version it does not speak.
WIRE_VERSION: Final = 1
