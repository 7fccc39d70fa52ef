"""Views of a session's workspace: files, git history and status, completed-work patches.

Private room of :mod:`emelex.service`; its public names are re-exported there.
"""
