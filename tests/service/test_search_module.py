"""``emelex.service.search`` is the API's name for the matcher, importable without Trio."""

from __future__ import annotations

import subprocess
import sys

from emelex import contracts
from emelex.service import search


def test_the_service_module_is_the_contract_matcher() -> None:
    assert search.find_matches is contracts.find_matches
    assert search.find_matches("Aß", "aẞ", case_sensitive=False, whole_word=True) == [(0, 2)]


def test_importing_it_loads_neither_trio_nor_the_engine() -> None:
    probe = (
        "import sys, emelex.service.search; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'emelex') "
        "and not m.startswith(('emelex.contracts', 'emelex.service'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = "['emelex', 'emelex._errors', 'emelex._facade', 'emelex._version']"
    assert done.stdout.strip() == loaded
