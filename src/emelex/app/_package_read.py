"""Loading a package: its tree and manifest become an :class:`Agent` (see
``docs/app/packages.md``)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from emelex.agent import ApprovalPolicy, Hook
from emelex.app._agent import SKILL_NAME, Agent, RestartMode, SeedFile
from emelex.app._errors import (
    AppError,
    InvalidAgent,
    InvalidPackage,
    InvalidSkill,
    MissingBinding,
    PackageProblem,
    SkillTooLarge,
)
from emelex.app._package_format import (
    DENY,
    INSTRUCTIONS,
    MANIFEST,
    SKILL_FILE,
    LoadedPackage,
    PackageInfo,
    unbound_client,
)
from emelex.app._package_info import DEFAULTS
from emelex.app._package_manifest import generation_options, read_manifest
from emelex.app._package_refs import resolve_hooks, resolve_subagents
from emelex.app._package_tree import PackageRead, read_tree
from emelex.app._policy import WorkspacePolicy
from emelex.app._skill import Skill, skill_files
from emelex.model import AgentModel, Client, GenerationOptions


def read_package(path: str | os.PathLike[str]) -> PackageRead:
    """The tree and the manifest of the package at ``path``, with every problem."""
    return read_tree(path, read_manifest)


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


def _skills(read: PackageRead) -> list[Skill]:
    skills: list[Skill] = []
    names: set[str] = set()
    for directory, contents in read.skills.items():
        where = f"skills/{directory}/{SKILL_FILE}"
        content = contents.get(SKILL_FILE)
        if content is None:
            continue  # reported by the tree reader
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
        others = {path: data for path, data in contents.items() if path != SKILL_FILE}
        try:
            files = skill_files(name, others)
        except SkillTooLarge as exc:
            read.problem(f"skills/{directory}", "skill-too-large", str(exc))
            continue
        except InvalidSkill as exc:
            read.problem(f"skills/{directory}", "bad-skill", str(exc))
            continue
        skills.append(Skill(name, description, body, files))
    return skills


def _seeds(read: PackageRead) -> list[SeedFile]:
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
    hooks: tuple[Hook, ...] = ()
    subagents: tuple[Any, ...] = ()
    on_restart: RestartMode = "resume"


def _parse(
    path: str | os.PathLike[str], modules: Sequence[str] = ()
) -> tuple[_Parsed | None, list[PackageProblem]]:
    read = read_package(path)
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
    # Imported only now, once the manifest is known to be valid (and only modules the
    # host allowed).
    text = read.manifest_text
    hooks = resolve_hooks(read, text, manifest.get("hooks", []), modules)
    subagents = resolve_subagents(read, text, manifest.get("subagents", []), modules)
    if read.problems:
        return None, read.problems
    policy = WorkspacePolicy(
        write=workspace.get("policy", "read_only") == "read_write",
        hidden=tuple(workspace.get("hidden", [])),
        recursive_delete=workspace.get("recursive_delete", False),
    )
    parsed = _Parsed(
        info=PackageInfo(
            description=agent.get("description", DEFAULTS.description),
            version=agent.get("version", DEFAULTS.version),
            binding=model.get("binding", DEFAULTS.binding),
            preset=manifest.get("harness", {}).get("preset", DEFAULTS.preset),
        ),
        name=agent["name"],
        instructions=instructions,
        policy=policy,
        options=generation_options(model),
        capabilities=capabilities,
        plugins=tuple(read.root / p for p in manifest.get("plugins", {}).get("paths", [])),
        files=tuple(seeds),
        skills=tuple(skills),
        hooks=tuple(hooks),
        subagents=tuple(subagents),
        on_restart=manifest.get("harness", {}).get("on_restart", "resume"),
    )
    return parsed, []


# -- public API --------------------------------------------------------------------------


def validate_package(
    path: str | os.PathLike[str], *, modules: Sequence[str] = ()
) -> list[PackageProblem]:
    """Every problem of the package at ``path`` (empty when it is valid); needs no
    model. Also builds the agent (with a placeholder model and approver) so the
    builder's own checks are reported. ``modules`` as for :func:`load_package`."""
    parsed, problems = _parse(path, modules)
    if parsed is None:
        return problems
    try:
        _build(parsed, unbound_client(parsed.info.binding), DENY)
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
        .package(parsed.info)
        .on_restart(parsed.on_restart)
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
    for hook in parsed.hooks:
        builder.hook(hook)
    for subagent in parsed.subagents:
        builder.tool(subagent)
    for skill in parsed.skills:
        builder.skill(
            skill.name,
            skill.description,
            skill.instructions,
            files={file.path: file.content for file in skill.files},
        )
    return builder.build()


def load_package(
    path: str | os.PathLike[str],
    *,
    bindings: Mapping[str, Client | AgentModel] | None = None,
    approver: ApprovalPolicy | None = None,
    modules: Sequence[str] = (),
) -> LoadedPackage:
    """Load the package at ``path``: its :class:`Agent` and its :class:`PackageInfo`.

    The manifest's model binding is looked up in ``bindings`` (a Client or any
    AgentModel; :class:`MissingBinding` when absent). Without ``bindings`` the agent
    gets the placeholder :func:`unbound_client` whose generations fail. ``approver``
    is host configuration (packages hold no code); without one the agent gets a
    shared :class:`~emelex.agent.DenyAll`, so every gated call (writes, the shell) is
    denied until the host supplies a real approver. ``modules`` are the modules (or
    dotted prefixes) whose code the package's ``[[hooks]]`` and ``[[subagents]]`` may
    name; a reference outside them is a problem, and nothing is imported for it.
    Raises :class:`InvalidPackage` with every problem at once.
    """
    parsed, problems = _parse(path, modules)
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
    agent = _build(parsed, client, DENY if approver is None else approver)
    return LoadedPackage(agent)


def load_agent(
    path: str | os.PathLike[str],
    *,
    bindings: Mapping[str, Client | AgentModel] | None = None,
    approver: ApprovalPolicy | None = None,
    modules: Sequence[str] = (),
) -> Agent:
    """The :class:`Agent` of :func:`load_package` (without the package's metadata)."""
    return load_package(path, bindings=bindings, approver=approver, modules=modules).agent


__all__ = ["load_agent", "load_package", "read_package", "validate_package"]
