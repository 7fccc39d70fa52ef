"""The agent service: the persisted Host that clients drive through the wire contracts.

:mod:`emelex.service.search` holds the pure search matcher the Host uses. Keep this
module free of eager engine imports: ``emelex.service.search`` must stay importable
without Trio (``tests/service/test_search_module.py`` checks it).
"""
