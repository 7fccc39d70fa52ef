"""``emelex serve`` works in the environment the README's first command sets up: every
third-party module the serve path imports (``emelex.service``, ``emelex.store``, the
``serve`` command) comes from a core dependency or an extra that ``scripts/demo``
installs, and the README's web page section names the extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "emelex"
#: Asked for by name (``--store postgresql://...``), with its own extra (docs/service/
#: scale-out.md); a Host on its default SQLite store never imports it.
OPTIONAL = {SRC / "store" / "postgres": "postgres"}


def _serve_files() -> list[Path]:
    files = [SRC / "cli" / "_serve.py"]
    for package in (SRC / "service", SRC / "store"):
        files += sorted(package.rglob("*.py"))
    return [path for path in files if not any(path.is_relative_to(skip) for skip in OPTIONAL)]


def _third_party_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if top not in sys.stdlib_module_names and top != "emelex":
                found.add(top)
    return found


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(text).name) for text in requirements}


def _demo_extras() -> list[str]:
    found = re.search(
        r'pip install [^\n]*-e "\.\[([a-z,-]+)\]"', (ROOT / "scripts" / "demo").read_text()
    )
    assert found, "scripts/demo installs no extras"
    return found.group(1).split(",")


def test_the_demo_environment_can_serve() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    installed = _names(project["dependencies"])
    for extra in _demo_extras():
        installed |= _names(extras[extra])
    providers = packages_distributions()
    missing = {}
    for path in _serve_files():
        for module in _third_party_modules(path):
            names = {canonicalize_name(name) for name in providers.get(module, [module])}
            if not names & installed:
                missing[module] = str(path.relative_to(ROOT))
    assert not missing, f"imported by emelex serve, not installed by scripts/demo: {missing}"


def test_the_readme_names_the_extra_of_the_web_page() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (serving,) = [
        name
        for name, requirements in project["optional-dependencies"].items()
        if "hypercorn" in _names(requirements) and name != "dev"
    ]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.partition("## A web page for the Host")[2].partition("\n## ")[0]
    assert f"pip install 'emelex[{serving}]'" in section
