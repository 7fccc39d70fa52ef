"""The Host on the wire: routes, HTTP and WebSocket servers, listeners, and the client.

Private room of :mod:`emelex.service`; its public names are re-exported there.
"""
