"""Operations over sessions that are more than a commit: admission, forks, interactions,
the executor, the work hub, search pages and the context report.

Each module gets narrow capabilities (the registry, a session, the store), never the Host.
Private room of :mod:`emelex.service`; its public names are re-exported there.
"""
