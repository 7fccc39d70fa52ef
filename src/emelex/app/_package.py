"""Agent packages: a portable folder format for agents (see ``docs/app/packages.md``).

::

    my-agent/
        agent.toml              # [agent] [model] [harness] [workspace] [[capabilities]] [plugins]
        instructions.md         # the agent's instructions, byte for byte
        files/**                # seeded editable files
        readonly/**             # seeded read-only files
        skills/<name>/SKILL.md  # front matter (name, description) and the skill's body
        plugins/<name>/         # optional local plugins named in [plugins] paths

The model is named by a symbolic *binding* (``"default"`` unless the manifest says
otherwise) that the host resolves at load time; no credential lives in a package.
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import re
import tomllib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import trio

from emelex.agent import ApprovalPolicy, DenyAll
from emelex.app._agent import AGENT_NAME, SKILL_NAME, Agent, SeedFile, Skill
from emelex.app._capabilities import BUILTIN_OPTIONS, BuiltinCapability
from emelex.app._errors import AppError, InvalidAgent
from emelex.app._harness import Harness
from emelex.app._policy import WorkspacePolicy
from emelex.model import (
    AgentModel,
    Capabilities,
    Client,
    GenerationOptions,
    GenerationRequest,
    ModelError,
)

MANIFEST = "agent.toml"
INSTRUCTIONS = "instructions.md"
SKILL_FILE = "SKILL.md"
#: Largest single file a package may hold, in bytes.
MAX_FILE_BYTES = 1024 * 1024
#: Largest total of all files of a package, in bytes.
MAX_PACKAGE_BYTES = 16 * 1024 * 1024
#: Most files a package may hold.
MAX_FILES = 2000
PRESETS = ("base", "conversation", "worker", "shell_worker")
POLICIES = ("read_only", "read_write")
TOP_LEVEL = frozenset({MANIFEST, INSTRUCTIONS, "files", "readonly", "skills", "plugins"})
BINDING_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
_KEYS: Mapping[str, frozenset[str]] = {
    "": frozenset({"agent", "model", "harness", "workspace", "capabilities", "plugins"}),
    "agent": frozenset({"name", "description", "version"}),
    "model": frozenset({"binding", "max_tokens", "temperature", "top_p", "seed", "stop"}),
    "harness": frozenset({"preset"}),
    "workspace": frozenset({"policy", "hidden", "recursive_delete"}),
    "capabilities": frozenset({"id", "options"}),
    "plugins": frozenset({"paths"}),
}
_SECRET_KEY = re.compile(
    r"(?i)^(api[_-]?key|(access|auth|bearer|refresh)?[_-]?token|(client[_-]?)?secret"
    r"|password|passwd|credentials?|authorization|headers?)$"
)
_SECRET_URL = re.compile(r"(?i)[a-z][a-z0-9+.-]*://[^/\s@]+@|[?&](api[_-]?key|key|token|sig)=")
_TOML_LINE = re.compile(r"at line (\d+)")


# -- errors and results ----------------------------------------------------------------


@attrs.frozen
class PackageProblem:
    """One thing wrong with a package: where (package-relative path, line if known),
    a stable ``code`` and a sentence."""

    path: str
    code: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message} [{self.code}]"


class PackageError(AppError):
    """A package could not be loaded or exported; ``problems`` lists every reason."""

    def __init__(self, message: str, problems: Sequence[PackageProblem] = ()) -> None:
        self.problems = tuple(problems)
        detail = "".join(f"\n  {problem}" for problem in self.problems)
        super().__init__(message + detail)


class InvalidPackage(PackageError, InvalidAgent):
    """The package failed validation (see ``problems``)."""


class MissingBinding(PackageError):
    """``bindings`` were given but none is named like the package's model binding."""


@attrs.frozen
class Change:
    """One structural difference between two packages: ``kind`` is ``"added"``,
    ``"removed"`` or ``"changed"``; ``path`` names the part (``agent.version``,
    ``instructions``, ``files/notes.md``, ``skills/review``, ...)."""

    kind: str
    path: str
    before: str | None = None
    after: str | None = None

    def __str__(self) -> str:
        mark = {"added": "+", "removed": "-", "changed": "~"}.get(self.kind, "?")
        if self.kind == "changed" and self.before is not None and self.after is not None:
            return f"{mark} {self.path}: {self.before} -> {self.after}"
        return f"{mark} {self.path}"


@attrs.frozen
class PackageInfo:
    """What a package says besides the :class:`Agent` itself."""

    description: str = ""
    version: str = "0.1.0"
    binding: str = "default"
    preset: str = "base"

    def harness(self) -> Harness:
        """The harness preset the package names."""
        return _preset(self.preset)


# -- the placeholder model ---------------------------------------------------------------


class UnboundModelError(ModelError):
    """A package's model binding was not resolved when it was loaded."""


@attrs.frozen
class UnboundModel:
    """The model of an agent loaded without ``bindings``: it has a ``binding`` name
    and fails every generation with :class:`UnboundModelError`. Lets a package be
    validated, inspected, diffed and exported without a model or credentials."""

    binding: str

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    def generate(self, request: GenerationRequest) -> _UnboundGeneration:
        return _UnboundGeneration(self.binding)


class _UnboundGeneration:
    def __init__(self, binding: str) -> None:
        self._binding = binding

    async def __aenter__(self) -> Any:
        await trio.lowlevel.checkpoint()
        raise UnboundModelError(
            f"model binding {self._binding!r} was not resolved: load the package with "
            f"bindings={{{self._binding!r}: client}}"
        )

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_UNBOUND: dict[str, Client] = {}
#: The approver of agents loaded without one: every gated call is denied.
_DENY = DenyAll()


def unbound_client(binding: str) -> Client:
    """The shared placeholder client for ``binding`` (one per name, so agents loaded
    without bindings compare equal)."""
    client = _UNBOUND.get(binding)
    if client is None:
        client = _UNBOUND[binding] = Client(UnboundModel(binding))
    return client


# -- package metadata of loaded agents ---------------------------------------------------

_INFO: dict[int, PackageInfo] = {}


def _remember(agent: Agent, info: PackageInfo) -> None:
    key = id(agent)
    if key not in _INFO:
        weakref.finalize(agent, _INFO.pop, key, None)
    _INFO[key] = info


def package_info(agent: Agent) -> PackageInfo | None:
    """The package metadata of an agent returned by :func:`load_agent`, else None."""
    return _INFO.get(id(agent))


def _preset(name: str) -> Harness:
    presets = {
        "base": Harness.base,
        "conversation": Harness.conversation,
        "worker": Harness.worker,
        "shell_worker": Harness.shell_worker,
    }
    return presets[name]()


def package_harness(agent: Agent) -> Harness:
    """The harness preset of a loaded package's agent (``base`` for other agents)."""
    info = package_info(agent)
    return _preset(info.preset if info is not None else "base")


# -- reading -----------------------------------------------------------------------------


@attrs.define
class _Read:
    """A package as read from disk, with every problem found on the way."""

    root: pathlib.Path
    problems: list[PackageProblem] = attrs.Factory(list)
    manifest: dict[str, Any] = attrs.Factory(dict)
    instructions: bytes | None = None
    files: dict[str, bytes] = attrs.Factory(dict)
    readonly: dict[str, bytes] = attrs.Factory(dict)
    skills: dict[str, bytes] = attrs.Factory(dict)
    total: int = 0
    count: int = 0

    def problem(self, path: str, code: str, message: str, line: int | None = None) -> None:
        self.problems.append(PackageProblem(path, code, message, line))

    def read_file(self, path: pathlib.Path) -> bytes | None:
        rel = path.relative_to(self.root).as_posix()
        try:
            size = path.stat().st_size
        except OSError as exc:
            self.problem(rel, "unreadable", f"cannot read: {exc.strerror or exc}")
            return None
        self.count += 1
        if self.count == MAX_FILES + 1:
            self.problem(rel, "too-many-files", f"the package has more than {MAX_FILES} files")
        if size > MAX_FILE_BYTES:
            self.problem(
                rel, "file-too-large", f"{size} bytes is over the {MAX_FILE_BYTES}-byte limit"
            )
            return None
        self.total += size
        if self.total > MAX_PACKAGE_BYTES and self.total - size <= MAX_PACKAGE_BYTES:
            self.problem(rel, "package-too-large", f"the package is over {MAX_PACKAGE_BYTES} bytes")
        try:
            return path.read_bytes()
        except OSError as exc:
            self.problem(rel, "unreadable", f"cannot read: {exc.strerror or exc}")
            return None


def _walk(read: _Read, directory: pathlib.Path) -> Iterator[pathlib.Path]:
    """Regular files under ``directory`` in sorted order; reports symlinks and other
    special entries instead of following them."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        read.problem(
            directory.relative_to(read.root).as_posix(), "unreadable", f"cannot list: {exc}"
        )
        return
    for entry in entries:
        rel = entry.relative_to(read.root).as_posix()
        if entry.is_symlink():
            read.problem(rel, "symlink", "symbolic links are not allowed in a package")
        elif entry.is_dir():
            if not any(entry.iterdir()):
                read.problem(rel, "empty-directory", "empty directories are not kept by the format")
            yield from _walk(read, entry)
        elif entry.is_file():
            if "\\" in entry.name or len(os.fsencode(entry.name)) > 255:
                read.problem(rel, "bad-path", "the file name is not portable")
                continue
            yield entry
        else:
            read.problem(rel, "special-file", "only regular files and directories are allowed")


def _read(path: str | os.PathLike[str]) -> _Read:
    root = pathlib.Path(os.fspath(path))
    read = _Read(root)
    if root.is_symlink():
        read.problem(".", "symlink", "the package directory is a symbolic link")
        return read
    if not root.is_dir():
        read.problem(".", "not-a-directory", f"{str(root)!r} is not a directory")
        return read
    read.root = root = root.resolve()
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name not in TOP_LEVEL:
            read.problem(entry.name, "unknown-entry", "not part of the package format")
        elif entry.is_symlink():
            read.problem(entry.name, "symlink", "symbolic links are not allowed in a package")
    _read_manifest(read)
    instructions = root / INSTRUCTIONS
    if instructions.is_symlink():
        pass  # reported above
    elif not instructions.is_file():
        read.problem(INSTRUCTIONS, "missing-instructions", "the package has no instructions.md")
    else:
        read.instructions = read.read_file(instructions)
    for folder, into in (("files", read.files), ("readonly", read.readonly)):
        base = root / folder
        if base.is_symlink():
            continue
        if base.exists() and not base.is_dir():
            read.problem(folder, "not-a-directory", f"{folder} must be a directory")
            continue
        if base.is_dir():
            for file in _walk(read, base):
                content = read.read_file(file)
                if content is not None:
                    into[file.relative_to(base).as_posix()] = content
    skills = root / "skills"
    if skills.is_dir() and not skills.is_symlink():
        for entry in sorted(skills.iterdir(), key=lambda p: p.name):
            rel = f"skills/{entry.name}"
            if entry.is_symlink():
                read.problem(rel, "symlink", "symbolic links are not allowed in a package")
                continue
            if not entry.is_dir():
                read.problem(rel, "bad-skill", "skills/ holds one directory per skill")
                continue
            found = False
            for file in _walk(read, entry):
                if file == entry / SKILL_FILE:
                    found = True
                    content = read.read_file(file)
                    if content is not None:
                        read.skills[entry.name] = content
                else:
                    read.problem(
                        file.relative_to(root).as_posix(),
                        "bad-skill",
                        "a skill directory holds only SKILL.md",
                    )
            if not found:
                read.problem(f"{rel}/{SKILL_FILE}", "bad-skill", "the skill has no SKILL.md")
    elif skills.exists() and not skills.is_symlink():
        read.problem("skills", "not-a-directory", "skills must be a directory")
    plugins = root / "plugins"
    if plugins.is_dir() and not plugins.is_symlink():
        for file in _walk(read, plugins):
            read.read_file(file)  # bounds and symlinks only; plugins are checked on load
    return read


def _line_of(text: str, key: str) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=|^\s*\[+\s*{re.escape(key)}\s*\]+")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return number
    return None


def _read_manifest(read: _Read) -> None:
    path = read.root / MANIFEST
    if path.is_symlink():
        return
    if not path.is_file():
        read.problem(MANIFEST, "missing-manifest", "the package has no agent.toml")
        return
    content = read.read_file(path)
    if content is None:
        return
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        read.problem(MANIFEST, "bad-toml", f"not UTF-8 text: {exc.reason}")
        return
    try:
        manifest = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_LINE.search(str(exc))
        line = int(match.group(1)) if match else None
        read.problem(MANIFEST, "bad-toml", f"invalid TOML: {exc}", line)
        return
    read.manifest = manifest
    _check_manifest(read, text, manifest)


def _check_manifest(read: _Read, text: str, manifest: dict[str, Any]) -> None:
    def bad(code: str, message: str, key: str) -> None:
        read.problem(MANIFEST, code, message, _line_of(text, key))

    for key in manifest:
        if key not in _KEYS[""]:
            bad("unknown-key", f"unknown table or key {key!r}", key)
    for table in ("agent", "model", "harness", "workspace", "plugins"):
        value = manifest.get(table, {})
        if not isinstance(value, dict):
            bad("bad-value", f"{table} must be a table", table)
            manifest[table] = {}
            continue
        for key in value:
            if key not in _KEYS[table]:
                bad("unknown-key", f"unknown key {table}.{key}", key)
    _check_secrets(read, text, manifest, "")
    agent = manifest.get("agent", {})
    if "agent" not in manifest:
        read.problem(MANIFEST, "missing-key", "the manifest has no [agent] table")
    name = agent.get("name")
    if name is None:
        if "agent" in manifest:
            bad("missing-key", "agent.name is required", "agent")
    elif not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        bad("bad-name", f"agent name {name!r} must be 1-64 letters, digits, _ . -", "name")
    description = agent.get("description", "")
    if not isinstance(description, str):
        bad("bad-value", "agent.description must be text", "description")
    version = agent.get("version", "0.1.0")
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        bad("bad-value", f"agent.version {version!r} is not a version", "version")
    model = manifest.get("model", {})
    binding = model.get("binding", "default")
    if not isinstance(binding, str) or not BINDING_NAME.fullmatch(binding):
        bad(
            "bad-binding",
            f"model binding {binding!r} must be a symbolic name (lowercase, digits, _ . -)",
            "binding",
        )
    for key in ("max_tokens", "temperature", "top_p", "seed", "stop"):
        if key in model:  # one check per key, so every bad option is reported
            try:
                _options({key: model[key]})
            except ValueError as exc:
                bad("bad-value", str(exc), key)
    preset = manifest.get("harness", {}).get("preset", "base")
    if preset not in PRESETS:
        bad("unknown-preset", f"harness preset {preset!r} is not one of {PRESETS}", "preset")
    workspace = manifest.get("workspace", {})
    policy = workspace.get("policy", "read_only")
    if policy not in POLICIES:
        bad("bad-policy", f"workspace policy {policy!r} is not one of {POLICIES}", "policy")
    hidden = workspace.get("hidden", [])
    if not isinstance(hidden, list) or not all(isinstance(h, str) and h for h in hidden):
        bad("bad-value", "workspace.hidden must be a list of glob patterns", "hidden")
    if not isinstance(workspace.get("recursive_delete", False), bool):
        bad("bad-value", "workspace.recursive_delete must be true or false", "recursive_delete")
    if preset == "shell_worker" and policy != "read_write":
        bad("bad-policy", "the shell_worker preset needs workspace policy read_write", "policy")
    _check_capabilities(read, text, manifest.get("capabilities", []), policy)
    paths = manifest.get("plugins", {}).get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        bad("bad-value", "plugins.paths must be a list of package-relative paths", "paths")
    else:
        seen: set[str] = set()
        for plugin in paths:
            parts = plugin.split("/")
            if plugin.startswith("/") or ".." in parts or "\\" in plugin:
                bad("path-escape", f"plugin path {plugin!r} leaves the package", "paths")
                continue
            if plugin in seen:
                bad("duplicate", f"plugin {plugin!r} is listed twice", "paths")
            seen.add(plugin)
            if not (read.root / plugin / "plugin.toml").is_file():
                bad("missing-plugin", f"plugin {plugin!r} has no plugin.toml", "paths")


def _check_secrets(read: _Read, text: str, value: Any, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else key
            if _SECRET_KEY.search(key):
                read.problem(
                    MANIFEST,
                    "credential",
                    f"{path} looks like a credential; bind models by name instead",
                    _line_of(text, key),
                )
            _check_secrets(read, text, item, path)
    elif isinstance(value, list):
        for item in value:
            _check_secrets(read, text, item, where)
    elif isinstance(value, str) and _SECRET_URL.search(value):
        read.problem(
            MANIFEST,
            "credential",
            f"{where} holds a URL with credentials; packages carry no secrets",
            _line_of(text, where.rsplit(".", 1)[-1]),
        )


def _check_capabilities(read: _Read, text: str, capabilities: Any, policy: Any) -> None:
    def bad(code: str, message: str, key: str = "capabilities") -> None:
        read.problem(MANIFEST, code, message, _line_of(text, key))

    if not isinstance(capabilities, list) or not all(isinstance(c, dict) for c in capabilities):
        bad("bad-value", "capabilities must be an array of tables ([[capabilities]])")
        return
    seen: set[str] = set()
    for entry in capabilities:
        for key in entry:
            if key not in _KEYS["capabilities"]:
                bad("unknown-key", f"unknown key capabilities.{key}", key)
        cid = entry.get("id")
        if not isinstance(cid, str):
            bad("missing-key", "every capability needs an id")
            continue
        if cid not in BUILTIN_OPTIONS:
            bad("unknown-capability", f"capability {cid!r} is not one of {sorted(BUILTIN_OPTIONS)}")
            continue
        if cid in seen:
            bad("duplicate", f"capability {cid!r} is listed twice")
        seen.add(cid)
        if cid == "shell" and policy != "read_write":
            bad("bad-policy", "the shell capability needs workspace policy read_write")
        options = entry.get("options", {})
        if not isinstance(options, dict):
            bad("bad-value", f"capability {cid!r}: options must be a table")
            continue
        checks = BUILTIN_OPTIONS[cid]
        for key, value in options.items():
            if key not in checks:
                bad("unknown-key", f"capability {cid!r} has no option {key!r}", key)
                continue
            try:
                checks[key](value)
            except ValueError as exc:
                bad("bad-value", f"capability {cid!r} option {key!r} {exc}", key)


def _options(model: Mapping[str, Any]) -> GenerationOptions:
    def number(key: str, kind: type | tuple[type, ...]) -> Any:
        value = model.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise ValueError(f"model.{key} must be a number")
        return value

    max_tokens = number("max_tokens", int)
    if max_tokens is not None and max_tokens < 1:
        raise ValueError("model.max_tokens must be positive")
    stop = model.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ValueError("model.stop must be a list of strings")
    temperature = number("temperature", (int, float))
    top_p = number("top_p", (int, float))
    return GenerationOptions(
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p),
        seed=number("seed", int),
        stop=tuple(stop),
    )


def _front_matter(text: str) -> tuple[dict[str, str], str] | str:
    """Split ``---``-delimited front matter (``key: value`` lines) from the body;
    returns an error sentence when the front matter is malformed."""
    if not text.startswith("---\n"):
        return "SKILL.md must start with a '---' front matter line"
    end = text.find("\n---\n", 3)
    if end < 0:
        return "the front matter has no closing '---' line"
    fields: dict[str, str] = {}
    for line in text[4:end].split("\n"):
        if not line.strip():
            continue
        key, colon, value = line.partition(":")
        if not colon or not key.strip().isidentifier():
            return f"front matter line {line!r} is not 'key: value'"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key.strip() in fields:
            return f"front matter key {key.strip()!r} is given twice"
        fields[key.strip()] = value
    return fields, text[end + 5 :]


def _skills(read: _Read) -> list[Skill]:
    skills: list[Skill] = []
    names: set[str] = set()
    for directory, content in read.skills.items():
        where = f"skills/{directory}/{SKILL_FILE}"
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            read.problem(where, "bad-skill", "SKILL.md is not UTF-8 text")
            continue
        parsed = _front_matter(text)
        if isinstance(parsed, str):
            read.problem(where, "bad-front-matter", parsed, 1)
            continue
        fields, body = parsed
        unknown = sorted(set(fields) - {"name", "description"})
        if unknown:
            read.problem(where, "bad-front-matter", f"unknown front matter keys {unknown}", 1)
        name = fields.get("name", "")
        description = fields.get("description", "")
        if not SKILL_NAME.fullmatch(name):
            read.problem(
                where, "bad-front-matter", f"skill name {name!r} must be lowercase a-z 0-9 -", 1
            )
        elif name != directory:
            read.problem(
                where, "bad-front-matter", f"skill {name!r} lives in directory {directory!r}", 1
            )
        if name in names:
            read.problem(where, "duplicate", f"two skills are named {name!r}", 1)
        names.add(name)
        if not description.strip():
            read.problem(where, "bad-front-matter", "the skill needs a description", 1)
        if not body.strip():
            read.problem(where, "bad-skill", "the skill has no instructions after the front matter")
        skills.append(Skill(name, description, body))
    return skills


def _seeds(read: _Read) -> list[SeedFile]:
    from emelex.app._agent import _seed_path

    seeds: list[SeedFile] = []
    for path in sorted(set(read.files) & set(read.readonly)):
        read.problem(f"readonly/{path}", "duplicate", f"{path!r} is in both files/ and readonly/")
    for folder, files, readonly in (
        ("files", read.files, False),
        ("readonly", read.readonly, True),
    ):
        for path, content in files.items():
            try:
                normal = _seed_path(path)
            except InvalidAgent as exc:
                read.problem(f"{folder}/{path}", "bad-path", str(exc))
                continue
            seeds.append(SeedFile(normal, content, readonly))
    paths = {seed.path for seed in seeds}
    for seed in seeds:
        parts = seed.parts
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in paths:
                read.problem(seed.path, "duplicate", "a seeded file is also a directory")
    return seeds


@attrs.frozen
class _Parsed:
    info: PackageInfo
    name: str
    instructions: str
    policy: WorkspacePolicy
    options: GenerationOptions
    capabilities: tuple[tuple[str, dict[str, Any]], ...]
    plugins: tuple[pathlib.Path, ...]
    files: tuple[SeedFile, ...]
    skills: tuple[Skill, ...]


def _parse(path: str | os.PathLike[str]) -> tuple[_Parsed | None, list[PackageProblem]]:
    read = _read(path)
    instructions = ""
    if read.instructions is not None:
        try:
            instructions = read.instructions.decode("utf-8")
        except UnicodeDecodeError:
            read.problem(INSTRUCTIONS, "bad-instructions", "instructions.md is not UTF-8 text")
        else:
            if not instructions.strip():
                read.problem(INSTRUCTIONS, "blank-instructions", "instructions.md is blank")
    skills = _skills(read)
    seeds = _seeds(read)
    manifest = read.manifest
    if read.problems or not manifest:
        return None, read.problems
    agent, model = manifest.get("agent", {}), manifest.get("model", {})
    workspace = manifest.get("workspace", {})
    capabilities = tuple(
        (entry["id"], dict(entry.get("options", {}))) for entry in manifest.get("capabilities", [])
    )
    if any(cid == "skills" for cid, _ in capabilities) and not skills:
        read.problem(MANIFEST, "bad-value", "the skills capability needs at least one skill")
        return None, read.problems
    policy = WorkspacePolicy(
        write=workspace.get("policy", "read_only") == "read_write",
        hidden=tuple(workspace.get("hidden", [])),
        recursive_delete=workspace.get("recursive_delete", False),
    )
    parsed = _Parsed(
        info=PackageInfo(
            description=agent.get("description", ""),
            version=agent.get("version", "0.1.0"),
            binding=model.get("binding", "default"),
            preset=manifest.get("harness", {}).get("preset", "base"),
        ),
        name=agent["name"],
        instructions=instructions,
        policy=policy,
        options=_options(model),
        capabilities=capabilities,
        plugins=tuple(read.root / p for p in manifest.get("plugins", {}).get("paths", [])),
        files=tuple(seeds),
        skills=tuple(skills),
    )
    return parsed, []


# -- public API --------------------------------------------------------------------------


def validate_package(path: str | os.PathLike[str]) -> list[PackageProblem]:
    """Every problem of the package at ``path`` (empty when it is valid); needs no
    model. Also builds the agent (with a placeholder model and approver) so the
    builder's own checks are reported."""
    parsed, problems = _parse(path)
    if parsed is None:
        return problems
    try:
        _build(parsed, unbound_client(parsed.info.binding), _DENY)
    except AppError as exc:
        return [PackageProblem(MANIFEST, "invalid-agent", str(exc))]
    return []


def _build(parsed: _Parsed, client: Client, approver: ApprovalPolicy | None) -> Agent:
    builder = (
        Agent.builder()
        .name(parsed.name)
        .instructions(parsed.instructions)
        .client(client)
        .workspace_policy(parsed.policy)
        .options(parsed.options)
    )
    if approver is not None:
        builder.approver(approver)
    for cid, options in parsed.capabilities:
        builder.capability(cid, **options)
    for plugin in parsed.plugins:
        builder.plugin(plugin)
    for seed in parsed.files:
        if seed.readonly:
            builder.readonly_file(seed.path, seed.content)
        else:
            builder.file(seed.path, seed.content)
    for skill in parsed.skills:
        builder.skill(skill.name, skill.description, skill.instructions)
    return builder.build()


def load_agent(
    path: str | os.PathLike[str],
    *,
    bindings: Mapping[str, Client | AgentModel] | None = None,
    approver: ApprovalPolicy | None = None,
) -> Agent:
    """Load the package at ``path`` as an :class:`Agent`.

    The manifest's model binding is looked up in ``bindings`` (a Client or any
    AgentModel; :class:`MissingBinding` when absent). Without ``bindings`` the agent
    gets the placeholder :func:`unbound_client` whose generations fail. ``approver``
    is host configuration (packages hold no code); without one the agent gets a
    shared :class:`~emelex.agent.DenyAll`, so every gated call (writes, the shell) is
    denied until the host supplies a real approver. Raises :class:`InvalidPackage`
    with every problem at once. The package's description, version, binding and
    harness preset are available from :func:`package_info` / :func:`package_harness`.
    """
    parsed, problems = _parse(path)
    if parsed is None:
        raise InvalidPackage(f"package {os.fspath(path)!r} is invalid", problems)
    binding = parsed.info.binding
    if bindings is None:
        client = unbound_client(binding)
    else:
        if binding not in bindings:
            raise MissingBinding(
                f"package {os.fspath(path)!r} binds model {binding!r}, which bindings "
                f"do not name (they have {sorted(bindings)})"
            )
        value = bindings[binding]
        client = value if isinstance(value, Client) else Client(value)
    agent = _build(parsed, client, _DENY if approver is None else approver)
    _remember(agent, parsed.info)
    return agent


def _toml_string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{key} = {_toml_value(value[key])}" for key in sorted(value))
        return "{ " + items + " }" if items else "{}"
    raise PackageError(f"cannot write {value!r} to agent.toml")


def manifest_text(agent: Agent, info: PackageInfo, plugins: Sequence[str] = ()) -> str:
    """The canonical ``agent.toml`` of ``agent`` (deterministic)."""
    options = agent.options
    lines = [
        "[agent]",
        f"name = {_toml_value(agent.name)}",
        f"description = {_toml_value(info.description)}",
        f"version = {_toml_value(info.version)}",
        "",
        "[model]",
        f"binding = {_toml_value(info.binding)}",
    ]
    for key in ("max_tokens", "temperature", "top_p", "seed"):
        value = getattr(options, key)
        if value is not None:
            lines.append(f"{key} = {_toml_value(value)}")
    if options.stop:
        lines.append(f"stop = {_toml_value(list(options.stop))}")
    policy = agent.workspace_policy
    lines += [
        "",
        "[harness]",
        f"preset = {_toml_value(info.preset)}",
        "",
        "[workspace]",
        f"policy = {_toml_value('read_write' if policy.write else 'read_only')}",
        f"hidden = {_toml_value(list(policy.hidden))}",
        f"recursive_delete = {_toml_value(policy.recursive_delete)}",
    ]
    for capability in agent.capabilities:
        assert isinstance(capability, BuiltinCapability)
        lines += ["", "[[capabilities]]", f"id = {_toml_value(capability.id)}"]
        if capability.options:
            lines.append(f"options = {_toml_value(dict(capability.options))}")
    if plugins:
        lines += ["", "[plugins]", f"paths = {_toml_value(list(plugins))}"]
    return "\n".join(lines) + "\n"


def _exportable(agent: Agent, info: PackageInfo) -> list[str]:
    reasons: list[str] = []
    if agent.tools:
        reasons.append("it has code-defined tools (ship them as a plugin)")
    if agent.workspace is not None:
        reasons.append("it uses a host workspace directory")
    if agent.mcp_servers:
        reasons.append("it has MCP servers")
    if agent.output_type is not None:
        reasons.append("it has a code-defined output_type (set it again after loading)")
    for capability in agent.capabilities:
        if not isinstance(capability, BuiltinCapability):
            reasons.append(f"capability {capability.id!r} is not a built-in")
    if not isinstance(agent.options.reasoning, type(GenerationOptions().reasoning)):
        reasons.append("it sets reasoning options")
    for skill in agent.skills:
        if "\n" in skill.description or skill.description != skill.description.strip():
            reasons.append(f"skill {skill.name!r} has a multi-line or padded description")
    if info.preset not in PRESETS:
        reasons.append(f"harness preset {info.preset!r} is unknown")
    if not BINDING_NAME.fullmatch(info.binding):
        reasons.append(f"model binding {info.binding!r} is not a symbolic name")
    for plugin in agent.plugins:
        if not (plugin / "plugin.toml").is_file():
            reasons.append(f"plugin {str(plugin)!r} has no plugin.toml")
    if len({p.name for p in agent.plugins}) != len(agent.plugins):
        reasons.append("two plugins have the same directory name")
    return reasons


def _copy_tree(source: pathlib.Path, dest: pathlib.Path) -> None:
    for entry in sorted(source.rglob("*")):
        if "__pycache__" in entry.parts or entry.is_symlink():
            continue
        target = dest / entry.relative_to(source)
        if entry.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif entry.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(entry.read_bytes())


def export_agent(
    agent: Agent,
    path: str | os.PathLike[str],
    *,
    description: str | None = None,
    version: str | None = None,
    binding: str | None = None,
    preset: str | None = None,
) -> None:
    """Write ``agent`` as a package at ``path`` (a new or empty directory).

    The output is deterministic: exporting a loaded package and loading it again
    gives an equal agent, and exporting that gives byte-identical files. Metadata
    comes from the package the agent was loaded from (:func:`package_info`), else
    defaults (version 0.1.0, binding ``default``, preset ``base``); the keyword
    arguments override it. Refuses (:class:`PackageError`) agents with code-defined
    tools, capability packages, MCP servers or a host workspace: those are not
    portable. Plugins are copied into ``plugins/<directory name>``.
    """
    info = package_info(agent) or PackageInfo()
    info = attrs.evolve(
        info,
        description=info.description if description is None else description,
        version=info.version if version is None else version,
        binding=info.binding if binding is None else binding,
        preset=info.preset if preset is None else preset,
    )
    reasons = _exportable(agent, info)
    if reasons:
        raise PackageError(f"agent {agent.name!r} cannot be exported: " + "; ".join(reasons))
    root = pathlib.Path(os.fspath(path))
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise PackageError(f"export destination {str(root)!r} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    plugins = [f"plugins/{plugin.name}" for plugin in agent.plugins]
    (root / MANIFEST).write_bytes(manifest_text(agent, info, plugins).encode("utf-8"))
    (root / INSTRUCTIONS).write_bytes(agent.instructions.encode("utf-8"))
    for seed in sorted(agent.files, key=lambda f: (f.readonly, f.path)):
        target = root / ("readonly" if seed.readonly else "files") / seed.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(seed.content)
    for skill in sorted(agent.skills, key=lambda s: s.name):
        folder = root / "skills" / skill.name
        folder.mkdir(parents=True, exist_ok=True)
        description = skill.description
        if len(description) >= 2 and description[0] == description[-1] and description[0] in "'\"":
            quote = "'" if description[0] == '"' else '"'
            description = f"{quote}{description}{quote}"  # the reader strips one pair
        text = f"---\nname: {skill.name}\ndescription: {description}\n---\n"
        (folder / SKILL_FILE).write_bytes((text + skill.instructions).encode("utf-8"))
    for plugin in agent.plugins:
        _copy_tree(plugin, root / "plugins" / plugin.name)


def _snapshot(path: str | os.PathLike[str]) -> dict[str, str]:
    """A flat, comparable view of a package: manifest fields and content hashes."""
    read = _read(path)
    flat: dict[str, str] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                walk(value[key], f"{prefix}.{key}" if prefix else key)
        else:
            flat[prefix] = _toml_value(value) if not isinstance(value, dict) else str(value)

    manifest = dict(read.manifest)
    capabilities = manifest.pop("capabilities", [])
    plugins = manifest.pop("plugins", {})
    walk(manifest, "")
    if isinstance(capabilities, list):
        for entry in capabilities:
            if isinstance(entry, dict):
                cid = str(entry.get("id"))
                flat[f"capabilities.{cid}"] = _toml_value(entry.get("options", {}))
    if isinstance(plugins, dict):
        for plugin in plugins.get("paths", []) or []:
            flat[f"plugins.{plugin}"] = "present"

    def digest(content: bytes) -> str:
        return "sha256:" + hashlib.sha256(content).hexdigest()[:16]

    if read.instructions is not None:
        flat["instructions"] = digest(read.instructions)
    for folder, files in (("files", read.files), ("readonly", read.readonly)):
        for name, content in files.items():
            flat[f"{folder}/{name}"] = digest(content)
    for name, content in read.skills.items():
        flat[f"skills/{name}"] = digest(content)
    return flat


def diff_packages(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> list[Change]:
    """The structural differences from package ``a`` to package ``b``: manifest
    fields (``agent.version``, ``workspace.policy``, ``capabilities.<id>``, ...),
    ``instructions``, seeded files and skills (compared by SHA-256), sorted by path.
    Empty when the packages are equivalent. Raises :class:`InvalidPackage` when either
    side is not a directory with a readable ``agent.toml`` (other problems do not stop
    a diff)."""
    for path in (a, b):
        unreadable = [
            p
            for p in _read(path).problems
            if p.code in ("not-a-directory", "missing-manifest", "bad-toml")
        ]
        if unreadable:
            raise InvalidPackage(f"cannot diff {os.fspath(path)!r}", unreadable)
    before, after = _snapshot(a), _snapshot(b)
    changes: list[Change] = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            changes.append(Change("removed", key, before[key], None))
        elif key not in before:
            changes.append(Change("added", key, None, after[key]))
        elif before[key] != after[key]:
            changes.append(Change("changed", key, before[key], after[key]))
    return changes


def find_packages(directory: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Directories directly under ``directory`` that hold an ``agent.toml``, sorted."""
    root = pathlib.Path(os.fspath(directory))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).is_file())


__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_PACKAGE_BYTES",
    "PRESETS",
    "Change",
    "InvalidPackage",
    "MissingBinding",
    "PackageError",
    "PackageInfo",
    "PackageProblem",
    "UnboundModel",
    "UnboundModelError",
    "diff_packages",
    "export_agent",
    "find_packages",
    "load_agent",
    "manifest_text",
    "package_harness",
    "package_info",
    "validate_package",
]
