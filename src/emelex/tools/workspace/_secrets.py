"""Classification of paths that likely hold credentials.

The list below is data, not code: each rule is a short sequence of shell-style globs that
must match *consecutive* path components, compared case-insensitively (``.ENV`` and
``.Ssh/`` are caught like ``.env`` and ``.ssh/``). A rule that matches a directory marks
everything below it as well, because the rule may match anywhere in the component list.

Reads of a matching path need approval (the tool layer asks, this module only
classifies); recursive operations skip matching entries unless the call was approved
(``include_secrets=True``). The list is a heuristic meant to catch the common places
where keys and tokens live, not a guarantee: a secret can live in any file.

The list was checked (issue 30, 2026-12) against shhgit's file-name signatures
(github.com/eth0izzle/shhgit, ``app/rules/*.yara``: keyrings, password databases, shell and
database histories, ``hub``, Heroku, FTP/SFTP client files) and the home-directory paths of
the usual CLIs; the entries are written here for this matcher, not taken from it. Names
that are ordinary in source trees (``.bashrc``, ``.gitconfig``, ``*.log``, ``*.sqlite``)
stay out: asking for every one of them would train users to approve blindly.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

import attrs
import re2

from emelex.tools.workspace._sibling import parse_sibling


@attrs.frozen
class SecretRule:
    """One entry of the secret list: component globs and a human-readable reason."""

    components: tuple[str, ...]
    reason: str


SECRET_RULES: tuple[SecretRule, ...] = (
    # dotenv files and their variants (.env.local, .env.production, .env.example too:
    # templates are cheap to approve, a real file named like one is not cheap to leak)
    SecretRule((".env*",), "dotenv file"),  # .env, .env.local, .envrc (direnv)
    SecretRule(("*.env",), "dotenv file"),
    # private keys and certificates bundles
    SecretRule(("*.pem",), "PEM key or certificate"),
    SecretRule(("*.key",), "private key"),
    SecretRule(("*.p12",), "PKCS#12 bundle"),
    SecretRule(("*.pfx",), "PKCS#12 bundle"),
    SecretRule(("*.jks",), "Java keystore"),
    SecretRule(("*.keystore",), "keystore"),
    SecretRule(("*.ppk",), "PuTTY private key"),
    SecretRule(("id_rsa*",), "SSH key"),
    SecretRule(("id_dsa*",), "SSH key"),
    SecretRule(("id_ecdsa*",), "SSH key"),
    SecretRule(("id_ed25519*",), "SSH key"),
    # whole directories of credentials
    SecretRule((".ssh",), "SSH directory"),
    SecretRule((".gnupg",), "GnuPG directory"),
    SecretRule((".azure",), "Azure CLI credentials"),
    SecretRule((".config", "gcloud"), "Google Cloud credentials"),
    SecretRule((".password-store",), "pass password store"),
    # single well-known credential files
    SecretRule((".aws", "credentials"), "AWS credentials"),
    SecretRule((".aws", "config"), "AWS configuration"),
    SecretRule((".kube", "config"), "Kubernetes credentials"),
    SecretRule((".docker", "config.json"), "Docker registry credentials"),
    SecretRule((".config", "gh", "hosts.yml"), "GitHub CLI token"),
    SecretRule((".npmrc",), "npm token"),
    SecretRule((".pypirc",), "PyPI token"),
    SecretRule((".cargo", "credentials"), "Cargo registry token"),
    SecretRule((".cargo", "credentials.toml"), "Cargo registry token"),
    SecretRule((".gem", "credentials"), "RubyGems API key"),
    SecretRule((".s3cfg",), "s3cmd credentials"),
    SecretRule((".boto",), "boto credentials"),
    SecretRule((".config", "rclone", "rclone.conf"), "rclone remotes (hold credentials)"),
    SecretRule((".netrc",), "netrc credentials"),
    SecretRule(("_netrc",), "netrc credentials"),
    SecretRule((".git-credentials",), "git credentials"),
    SecretRule((".pgpass",), "PostgreSQL passwords"),
    SecretRule((".my.cnf",), "MySQL credentials"),
    SecretRule((".htpasswd",), "HTTP passwords"),
    SecretRule(("credentials.json",), "service credentials"),
    SecretRule(("client_secret*.json",), "OAuth client secret"),
    SecretRule(("service-account*.json",), "cloud service account key"),
    SecretRule(("secrets.yml",), "secrets file"),
    SecretRule(("secrets.yaml",), "secrets file"),
    SecretRule(("secrets.json",), "secrets file"),
    SecretRule((".vault-token",), "Vault token"),
    SecretRule(("terraform.tfstate",), "Terraform state (holds secrets)"),
    SecretRule(("*.tfvars",), "Terraform variables"),
    # issue 30: credential files of CLIs and package managers
    SecretRule((".config", "git", "credentials"), "git credentials"),  # XDG location
    SecretRule((".dockercfg",), "Docker registry credentials"),  # pre-1.7 Docker file
    SecretRule((".config", "containers", "auth.json"), "container registry credentials"),
    SecretRule((".terraform.d", "credentials.tfrc.json"), "Terraform Cloud token"),
    SecretRule((".terraformrc",), "Terraform CLI configuration (may hold tokens)"),
    SecretRule(("terraform.rc",), "Terraform CLI configuration (may hold tokens)"),
    SecretRule((".composer", "auth.json"), "Composer credentials"),
    SecretRule((".config", "composer", "auth.json"), "Composer credentials"),
    SecretRule((".aws", "sso", "cache"), "AWS SSO tokens"),
    SecretRule((".aws", "cli", "cache"), "AWS temporary credentials"),
    SecretRule((".m2", "settings-security.xml"), "Maven master password"),
    SecretRule((".m2", "settings.xml"), "Maven settings (hold server passwords)"),
    SecretRule((".config", "hub"), "GitHub hub token"),
    SecretRule((".heroku",), "Heroku credentials"),
    SecretRule((".databrickscfg",), "Databricks token"),
    SecretRule((".oci", "config"), "Oracle Cloud credentials"),
    SecretRule((".config", "op"), "1Password CLI"),
    SecretRule(("master.key",), "Rails master key"),
    SecretRule(("otr.private_key",), "OTR private key"),
    # FTP and SFTP clients store server passwords next to the hosts
    SecretRule(("sftp-config.json",), "SFTP credentials"),
    SecretRule((".vscode", "sftp.json"), "SFTP credentials"),
    SecretRule((".ftpconfig",), "FTP credentials"),
    SecretRule((".remote-sync.json",), "FTP/SFTP credentials"),
    # named files, not "*.xml": every XML file of a Java tree would take the slow path
    SecretRule(("filezilla", "sitemanager.xml"), "FileZilla saved servers"),
    SecretRule(("filezilla", "recentservers.xml"), "FileZilla saved servers"),
    SecretRule(("filezilla", "filezilla.xml"), "FileZilla saved servers"),
    # keyrings and password databases: whole stores of secrets
    SecretRule((".local", "share", "keyrings"), "GNOME keyring"),
    SecretRule(("*.keyring",), "keyring"),
    SecretRule(("*.keychain",), "macOS keychain"),
    SecretRule(("*.keychain-db",), "macOS keychain"),
    SecretRule(("*.kdbx",), "KeePass database"),
    # shell and database histories: passwords typed on command lines end up here
    SecretRule((".bash_history",), "shell history"),
    SecretRule((".zsh_history",), "shell history"),
    SecretRule((".zhistory",), "shell history"),
    SecretRule((".sh_history",), "shell history"),
    SecretRule(("fish_history",), "shell history"),
    SecretRule((".psql_history",), "database client history"),
    SecretRule((".mysql_history",), "database client history"),
    SecretRule((".sqlite_history",), "database client history"),
    SecretRule((".rediscli_history",), "database client history"),
    SecretRule((".dbshell",), "database client history"),  # MongoDB shell
    SecretRule((".python_history",), "interpreter history"),
    SecretRule((".node_repl_history",), "interpreter history"),
    SecretRule((".irb_history",), "interpreter history"),
    # process environments: reachable only as outside paths, but never harmless
    SecretRule(("proc", "*", "environ"), "process environment"),
    SecretRule(("proc", "*", "task", "*", "environ"), "process environment"),
)


def _alternation(globs: Sequence[str]) -> re.Pattern[str]:
    """One regex that fully matches any of the (lower-cased) globs."""
    return re.compile("|".join(f"(?:{fnmatch.translate(glob.lower())})" for glob in globs))


@lru_cache(maxsize=1)
def _compiled() -> tuple[re.Pattern[str], re.Pattern[str], tuple[tuple[re.Pattern[str], ...], ...]]:
    """Single-component rules as one regex, the last globs of longer rules as another
    (a cheap pre-filter), and the longer rules component by component."""
    single = _alternation([r.components[0] for r in SECRET_RULES if len(r.components) == 1])
    multi = [r.components for r in SECRET_RULES if len(r.components) > 1]
    last = _alternation([components[-1] for components in multi])
    longer = tuple(tuple(_alternation([glob]) for glob in components) for components in multi)
    return single, last, longer


_SHORTENED = "leftover of an interrupted write whose name was shortened (treated as secret)"


def _stand_in(name: str) -> str | None:
    """The name a temporary or recovery sibling stands for (lower-cased input), the name
    itself for ordinary names, or ``None`` when it cannot be known (a shortened name)."""
    sibling = parse_sibling(name)
    if sibling is None:
        return name
    if sibling.shortened:
        return None
    return sibling.stands_for


@lru_cache(maxsize=1)
def _rule_matchers() -> tuple[tuple[SecretRule, tuple[re.Pattern[str], ...]], ...]:
    """Every rule with one compiled matcher per component, in list order."""
    return tuple(
        (rule, tuple(_alternation([glob]) for glob in rule.components)) for rule in SECRET_RULES
    )


def _components(path: str | Sequence[str]) -> list[str] | None:
    """Lower-cased components with siblings replaced by what they stand for; ``None``
    when a component is a shortened sibling (secret whatever it stood for)."""
    parts = path.split("/") if isinstance(path, str) else list(path)
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        name = _stand_in(part.lower())
        if name is None:
            return None
        out.append(name)
    return out


def _match_ending_at(parts: Sequence[str], end: int) -> bool:
    """Whether a rule matches a window of lower-cased ``parts`` that ends at index ``end``."""
    single, last, longer = _compiled()
    name = parts[end]
    if single.fullmatch(name):
        return True
    if not last.fullmatch(name):
        return False
    for matchers in longer:
        start = end - len(matchers) + 1
        if start >= 0 and all(m.fullmatch(parts[start + i]) for i, m in enumerate(matchers)):
            return True
    return False


def secret_reason(path: str | Sequence[str]) -> str | None:
    """Return why ``path`` looks secret, or ``None`` when no rule matches.

    ``path`` is a ``/``-separated string (relative or absolute) or a list of components.
    A temporary or recovery sibling left by an interrupted write is as secret as the name
    it stands for.
    """
    parts = _components(path)
    if parts is None:
        return _SHORTENED
    for rule, matchers in _rule_matchers():
        width = len(matchers)
        for start in range(len(parts) - width + 1):
            window = parts[start : start + width]
            if all(m.fullmatch(part) for m, part in zip(matchers, window, strict=True)):
                return rule.reason
    return None


def is_secret_path(path: str | Sequence[str]) -> bool:
    """Whether any rule of :data:`SECRET_RULES` matches ``path`` (case-insensitively)."""
    parts = _components(path)
    if parts is None:
        return True
    return any(_match_ending_at(parts, end) for end in range(len(parts)))


def is_secret_child(parents: Sequence[str], name: str) -> bool:
    """Whether a rule matches a window ending at ``name``, the child of ``parents``.

    Recursive walks use this: every ancestor was checked when it was entered, so only
    windows that end at the new component can add a match.
    """
    single, last, _longer = _compiled()
    low = _stand_in(name.lower())
    if low is None:
        return True
    if single.fullmatch(low):
        return True
    if not last.fullmatch(low):
        return False
    parents_low = _components(parents)
    if parents_low is None:
        return True
    parts = [*parents_low, low]
    return _match_ending_at(parts, len(parts) - 1)


_WILDCARDS = frozenset("*?[]")


def _affixes(glob: str) -> tuple[str, str] | None:
    """``(prefix, suffix)`` literal text every name matching ``glob`` starts and ends
    with (``*`` may sit between them), or ``None`` when ``glob`` has another shape."""
    if not _WILDCARDS.intersection(glob):
        return glob, glob
    head, _star, tail = glob.partition("*")
    if _WILDCARDS.intersection(head) or _WILDCARDS.intersection(tail):
        return None
    return head, tail


_Affixes = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


@lru_cache(maxsize=1)
def _quick_reject() -> _Affixes | None:
    """What a lower-cased name must look like to match some rule's last component:
    ``(suffixes, prefixes, both_prefixes, both_suffixes)`` of the rules shaped ``*S``,
    ``P*`` and ``P*S`` or ``NAME`` (``None`` when some glob has another shape)."""
    ends: set[str] = set()
    starts: set[str] = set()
    both_starts: set[str] = set()
    both_ends: set[str] = set()
    for rule in SECRET_RULES:
        affixes = _affixes(rule.components[-1].lower())
        if affixes is None:
            return None
        head, tail = affixes
        if not head:
            ends.add(tail)
        elif not tail:
            starts.add(head)
        else:
            both_starts.add(head)
            both_ends.add(tail)
    return tuple(ends), tuple(starts), tuple(both_starts), tuple(both_ends)


def secret_child_test() -> Callable[[Sequence[str], str], bool]:
    """:func:`is_secret_child` with a fast path for recursive walks: a name shaped unlike
    every rule's last component (the rules are globs such as ``*.pem``, ``.env*``,
    ``id_rsa*`` or ``credentials.json``) is rejected with a few ``str`` calls, and only
    the rest (and leftovers of interrupted writes) get the full check."""
    quick = _quick_reject()
    if quick is None:
        return is_secret_child
    ends, starts, both_starts, both_ends = quick

    def test(parents: Sequence[str], name: str) -> bool:
        low = name.lower()
        if (
            ".emelex-" not in low
            and not low.endswith(ends)
            and not low.startswith(starts)
            and not (low.startswith(both_starts) and low.endswith(both_ends))
        ):
            return False
        return is_secret_child(parents, name)

    return test


@lru_cache(maxsize=1)
def _bulk_prefilter() -> Callable[[bytes], bool] | None:
    """Whether some line of a lower-cased, newline-joined listing (UTF-8, with a newline
    at both ends) could match a rule's last component or be a sibling: one RE2 search
    over an alternation of the rules' literal prefixes and suffixes (linear, ~1 GB/s).
    ``None`` when some rule's last component has another shape."""
    quick = _quick_reject()
    if quick is None:
        return None
    ends, starts, both_starts, _both_ends = quick
    options = re2.Options()
    options.log_errors = False
    alternatives = [re2.escape(end) + "\\n" for end in sorted(ends)]
    alternatives += ["\\n" + re2.escape(start) for start in sorted({*starts, *both_starts})]
    alternatives.append(re2.escape(".emelex-"))
    program = re2.compile("|".join(alternatives), options)._regexp
    unanchored = re2._re2.RE2.Anchor.UNANCHORED

    def could_match(text: bytes) -> bool:
        return bool(program.Match(unanchored, text, 0, len(text))[0][0] >= 0)

    return could_match


def listing_prefilter() -> Callable[[Sequence[str]], bool]:
    """Whether some name of a directory listing could be secret or a temporary or
    recovery sibling (``False`` means none is: the usual answer, found with one RE2
    search over the joined names; ``True`` only says to look name by name)."""
    could_match = _bulk_prefilter()
    if could_match is None:
        return bool

    def test(names: Sequence[str]) -> bool:
        if not names:
            return False
        text = "\n" + "\n".join(names).lower() + "\n"
        return could_match(text.encode("utf-8", "surrogatepass"))

    return test


def secret_names_test() -> Callable[[Sequence[str], Sequence[str]], frozenset[str]]:
    """The names of one directory listing that :func:`secret_child_test` would call
    secret, found in bulk: the names are joined by newlines (a newline sits before and
    after every name, so no rule's literal prefix or suffix can hide) and searched once
    for any rule's prefix or suffix; only a listing where some name could match gets
    the per-name check. The usual answer is an empty set."""
    per_name = secret_child_test()
    could_match = listing_prefilter()

    def test(parents: Sequence[str], names: Sequence[str]) -> frozenset[str]:
        if not could_match(names):
            return frozenset()
        return frozenset(name for name in names if per_name(parents, name))

    return test
