"""Tools an agent can call: the tool protocol, built-in tools and their I/O layers."""
