"""GBNF grammars for tool calls, built from the offered tools' JSON Schemas.

llama.cpp can constrain sampling with a GBNF grammar. For tool calls the grammar spells
out the family's call markup around a JSON object whose ``name`` is one of the offered
tools and whose arguments follow that tool's schema, so a proposed call is schema-valid
by construction. The grammar is *lazy*: it only starts constraining once the output
reaches the family's trigger (``<tool_call>``, ``[TOOL_CALLS]``, a leading ``{``), so
free text stays possible before it.

Supported schema keywords: ``type`` (single or a list), ``properties``, ``required``,
``enum``, ``const``, ``anyOf``/``oneOf``, ``items``, ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``minimum`` 0 (and 1 for integers), and local ``$ref``
to ``#/$defs/...`` or ``#/definitions/...``. Objects get exactly their declared
properties (required ones first). Any other keyword is not enforced: the value falls
back to the generic JSON rule of its type (the harness validates every call anyway).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from emelex.model._request import ToolDefinition
from emelex.model.llama._errors import GrammarError
from emelex.model.templates import ThinkMarkers, ToolCallFamily

_PRIMITIVES: Final = {
    "ws": '| " " | "\\n" [ \\t]{0,8}',
    "char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": '"\\"" char* "\\""',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "natural": '"0" | [1-9] [0-9]{0,15}',
    "positive": "[1-9] [0-9]{0,15}",
    "fraction": '"." [0-9]{1,16}',
    "exponent": "[eE] [-+]? [0-9]{1,3}",
    "number": "integer fraction? exponent?",
    "nonnegative-number": "natural fraction? exponent?",
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"',
    "array": '"[" ws ( value ( ws "," ws value )* )? ws "]"',
}
_MAX_REPEAT: Final = 64  # longest {m,n} repetition spelled out for arrays


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def _json_literal(value: Any) -> str:
    return gbnf_literal(json.dumps(value, ensure_ascii=False))


class _Builder:
    def __init__(self, root_schema: Mapping[str, Any], prefix: str) -> None:
        self.rules: dict[str, str] = {}
        self.root_schema = root_schema
        self.prefix = prefix
        self.refs: dict[str, str] = {}
        self.used_primitives: set[str] = set()

    def name(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", f"{self.prefix}-{hint}").strip("-").lower()
        base = base or "rule"
        candidate, counter = base, 1
        while candidate in self.rules or candidate in _PRIMITIVES:
            counter += 1
            candidate = f"{base}-{counter}"
        return candidate

    def add(self, hint: str, body: str) -> str:
        name = self.name(hint)
        self.rules[name] = body
        return name

    def primitive(self, name: str) -> str:
        self.used_primitives.add(name)
        return name

    def schema(self, schema: Any, hint: str) -> str:
        """A GBNF expression (a rule name or a parenthesised alternation) for ``schema``."""
        if schema is True or not isinstance(schema, Mapping) or not schema:
            return self.primitive("value")
        if "$ref" in schema:
            return self.ref(str(schema["$ref"]))
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema and isinstance(schema["enum"], Sequence):
            options = [_json_literal(item) for item in schema["enum"]]
            if not options:
                return self.primitive("value")
            return self.add(f"{hint}-enum", " | ".join(options))
        for key in ("anyOf", "oneOf"):
            alternatives = schema.get(key)
            if isinstance(alternatives, Sequence) and alternatives:
                parts = [self.schema(item, f"{hint}-{i}") for i, item in enumerate(alternatives)]
                return self.add(hint, " | ".join(parts))
        kind = schema.get("type")
        if isinstance(kind, list):
            parts = [
                self.schema({**schema, "type": each}, f"{hint}-{each}")
                for each in kind
                if isinstance(each, str)
            ]
            return self.add(hint, " | ".join(parts)) if parts else self.primitive("value")
        if kind is None and "properties" in schema:
            kind = "object"
        if kind is None and "items" in schema:
            kind = "array"
        return self.typed(schema, kind, hint)

    def typed(self, schema: Mapping[str, Any], kind: object, hint: str) -> str:
        if kind == "string":
            return self.string(schema, hint)
        if kind in ("integer", "number"):
            minimum = schema.get("minimum")
            if kind == "integer":
                if minimum == 1 or schema.get("exclusiveMinimum") == 0:
                    return self.primitive("positive")
                return self.primitive("natural" if minimum == 0 else "integer")
            if minimum == 0:
                self.used_primitives.update(("natural", "fraction", "exponent"))
                return self.primitive("nonnegative-number")
            self.used_primitives.update(("integer", "fraction", "exponent"))
            return self.primitive("number")
        if kind == "boolean":
            return self.primitive("boolean")
        if kind == "null":
            return self.primitive("null")
        if kind == "array":
            return self.array(schema, hint)
        if kind == "object":
            return self.object(schema, hint)
        return self.primitive("value")

    def string(self, schema: Mapping[str, Any], hint: str) -> str:
        low = schema.get("minLength")
        high = schema.get("maxLength")
        if not isinstance(low, int) and not isinstance(high, int):
            return self.primitive("string")
        self.primitive("char")
        low_n = low if isinstance(low, int) and low > 0 else 0
        repeat = f"{{{low_n},{high}}}" if isinstance(high, int) else f"{{{low_n},}}"
        return self.add(f"{hint}-string", f'"\\"" char{repeat} "\\""')

    def array(self, schema: Mapping[str, Any], hint: str) -> str:
        item = self.schema(schema.get("items", True), f"{hint}-item")
        self.primitive("ws")
        low = schema.get("minItems")
        high = schema.get("maxItems")
        low_n = low if isinstance(low, int) and low > 0 else 0
        high_n = high if isinstance(high, int) and high >= low_n else None
        if high_n is not None and high_n > _MAX_REPEAT:
            high_n = None
        if high_n == 0:
            return self.add(hint, '"[" ws "]"')
        more_low = max(low_n - 1, 0)
        more = f"{{{more_low},{high_n - 1}}}" if high_n is not None else f"{{{more_low},}}"
        body = f'"[" ws {item} ( ws "," ws {item} ){more} ws "]"'
        if low_n == 0:
            body = f'"[" ws ( {item} ( ws "," ws {item} ){more} )? ws "]"'
        return self.add(hint, body)

    def object(self, schema: Mapping[str, Any], hint: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return self.primitive("object")
        self.primitive("ws")
        required_names = schema.get("required")
        required = set(required_names) if isinstance(required_names, Sequence) else set()
        pairs: list[tuple[str, bool]] = []
        for key, subschema in properties.items():
            value = self.schema(subschema, f"{hint}-{key}")
            pair = f'{_json_literal(str(key))} ws ":" ws {value}'
            pairs.append((pair, key in required))
        mandatory = [pair for pair, is_required in pairs if is_required]
        optional = [pair for pair, is_required in pairs if not is_required]
        if mandatory:
            body = ' ws "," ws '.join(mandatory)
            body += "".join(f' ( ws "," ws {pair} )?' for pair in optional)
            return self.add(hint, f'"{{" ws {body} ws "}}"')
        # No required property: the first present one carries no comma.
        alternatives = []
        for index, first in enumerate(optional):
            rest = "".join(f' ( ws "," ws {pair} )?' for pair in optional[index + 1 :])
            alternatives.append(f"{first}{rest}")
        return self.add(hint, f'"{{" ws ( {" | ".join(alternatives)} )? ws "}}"')

    def ref(self, reference: str) -> str:
        if reference in self.refs:
            return self.refs[reference]
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", reference)
        defs = self.root_schema.get(match.group(1)) if match else None
        target = defs.get(match.group(2)) if match and isinstance(defs, Mapping) else None
        if match is None or target is None:
            return self.primitive("value")
        name = self.name(f"ref-{match.group(2)}")
        self.refs[reference] = name
        self.rules[name] = ""  # reserve the name; recursion refers to it
        self.rules[name] = self.schema(target, f"def-{match.group(2)}")
        return name

    def render(self, root: str) -> str:
        pending = set(self.used_primitives)
        needed: set[str] = set()
        while pending:
            name = pending.pop()
            if name in needed:
                continue
            needed.add(name)
            pending.update(
                token
                for token in re.findall(r"[a-z][a-z-]*", _PRIMITIVES[name])
                if token in _PRIMITIVES
            )
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        lines += [f"{name} ::= {_PRIMITIVES[name]}" for name in sorted(needed)]
        return "\n".join(lines) + "\n"


def schema_grammar(schema: Mapping[str, Any]) -> str:
    """A complete GBNF grammar (root rule ``root``) for values of one JSON Schema."""
    builder = _Builder(schema, "v")
    return builder.render(builder.schema(schema, "value"))


@attrs.frozen
class ToolGrammar:
    """A tool-call grammar and the output patterns that switch it on.

    ``triggers`` are regular expressions (ECMAScript syntax, as llama.cpp uses) that
    must match the whole output so far; the grammar constrains from their first group.
    With no triggers the grammar applies from the first token (a call is required).
    """

    text: str
    triggers: tuple[str, ...]


def _call_object(builder: _Builder, tool: ToolDefinition, arguments_key: str) -> str:
    arguments = builder.schema(tool.parameters, f"{tool.name}-arguments")
    builder.primitive("ws")
    body = (
        f'"{{" ws "\\"name\\"" ws ":" ws {_json_literal(tool.name)} ws "," ws '
        f'{gbnf_literal(json.dumps(arguments_key))} ws ":" ws {arguments} ws "}}"'
    )
    return builder.add(f"{tool.name}-call", body)


def _after_reasoning(think: ThinkMarkers | None, starts_in_reasoning: bool) -> str:
    """A regex prefix that skips a leading reasoning block, so a trigger inside the
    model's reasoning does not switch the grammar on."""
    if think is None:
        return ""
    close = re.escape(think.close)
    if starts_in_reasoning:
        return rf"[\s\S]*?{close}"
    opening = re.escape(think.open)
    return rf"(?:\s*{opening}[\s\S]*?{close}|(?!\s*{opening}))"


def tool_call_grammar(
    family: ToolCallFamily,
    tools: Sequence[ToolDefinition],
    *,
    think: ThinkMarkers | None = None,
    starts_in_reasoning: bool = False,
    required: bool = False,
) -> ToolGrammar:
    """The grammar for calls of ``tools`` in ``family``'s markup.

    With ``required`` the grammar applies from the first token of the answer (the model
    must call a tool); otherwise it is lazy and free text stays possible. Raises
    :class:`GrammarError` for :attr:`ToolCallFamily.NONE` or when no tools are given.
    """
    if family is ToolCallFamily.NONE:
        raise GrammarError("the chat template has no known tool-call markup to constrain")
    if not tools:
        raise GrammarError("a tool-call grammar needs at least one tool")
    builder = _Builder({}, "t")
    arguments_key = "parameters" if family is ToolCallFamily.LLAMA3_JSON else "arguments"
    calls = []
    for tool in tools:
        builder.root_schema = tool.parameters
        builder.refs = {}
        calls.append(_call_object(builder, tool, arguments_key))
    call = builder.add("call", " | ".join(calls))
    skip = _after_reasoning(think, starts_in_reasoning)
    triggers: tuple[str, ...]
    if family is ToolCallFamily.HERMES:
        block = builder.add("block", f'"<tool_call>" ws {call} ws "</tool_call>"')
        root = f"{block} ( ws {block} )*"
        triggers = (rf"{skip}[\s\S]*?(<tool_call>)[\s\S]*",)
    elif family is ToolCallFamily.MISTRAL:
        root = f'"[TOOL_CALLS]" ws "[" ws {call} ( ws "," ws {call} )* ws "]"'
        triggers = (rf"{skip}[\s\S]*?(\[TOOL_CALLS\])[\s\S]*",)
    else:
        root = f'"<|python_tag|>"? {call}'
        triggers = (rf"{skip}\s*(\{{)[\s\S]*", rf"{skip}\s*(<\|python_tag\|>)[\s\S]*")
    if required:
        if think is not None and starts_in_reasoning:
            # Reasoning stays free; the call is forced right after it closes.
            root = f"{gbnf_literal(think.close)} ws {root}"
            triggers = (rf"[\s\S]*?({re.escape(think.close)})[\s\S]*",)
        else:
            triggers = ()
    return ToolGrammar(builder.render(root), triggers)
