"""Docstrings for ``@tool``: the tool description and each parameter's description.

Parsing is ``docstring-parser``'s: Google, NumPy, reST and Epydoc styles, the one that
finds the most entries wins (the library's own rule), with the Google and NumPy
parameter sections widened to the headers emelex always read (``Keyword Args``,
``Keyword Arguments``, ``Other Parameters``). This module only decides what a tool
takes from the result:

* the description is the first paragraph, its lines joined with single spaces;
* a parameter's description is its text with whitespace collapsed; ``x, y : float``
  (NumPy) describes both names, ``*args`` is ``args``; the first mention wins;
* a docstring longer than :data:`MAX_DOCSTRING_CHARS` is cut (at a line end) before
  parsing; a malformed entry is skipped, and a docstring no style can parse still gives
  its first paragraph (a docstring never stops a function from becoming a tool).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Final

import docstring_parser
import docstring_parser.epydoc
import docstring_parser.google
import docstring_parser.numpydoc
import docstring_parser.rest

#: Longest docstring parsed; the rest is ignored (parsing cost stays bounded).
MAX_DOCSTRING_CHARS: Final = 100_000

#: The ``DocstringParam`` kinds that describe a call argument (not returns, raises, ...).
_PARAMETER_KINDS: Final = frozenset(
    {*docstring_parser.common.PARAM_KEYWORDS, "other_param", "other_parameter"}
)


_EXTRA_PARAMETER_HEADERS: Final = (
    "Keyword Args",
    "Keyword Arguments",
    "Other Parameters",
    "Other Params",
    "Other Args",
    "Other Arguments",
)
_MULTIPLE: Final = docstring_parser.google.SectionType.MULTIPLE


class _TolerantGoogleParser(docstring_parser.google.GoogleParser):
    """Google style where one malformed entry (no colon) is skipped, as emelex's own
    parser always did, instead of failing the whole docstring."""

    def _build_meta(self, text: str, title: str) -> docstring_parser.DocstringMeta:
        try:
            return super()._build_meta(text, title)
        except docstring_parser.ParseError:
            return docstring_parser.DocstringMeta(args=["unparsed"], description=text)


_google = _TolerantGoogleParser(
    [
        *docstring_parser.google.DEFAULT_SECTIONS,
        *(
            docstring_parser.google.Section(title, "param", _MULTIPLE)
            for title in _EXTRA_PARAMETER_HEADERS
        ),
    ]
)
_numpy = docstring_parser.numpydoc.NumpydocParser()
_numpy.add_section(docstring_parser.numpydoc.ParamSection("Keyword Arguments", "param"))
_PARSERS: Final[tuple[Callable[[str], docstring_parser.Docstring], ...]] = (
    docstring_parser.rest.parse,
    _google.parse,
    _numpy.parse,
    docstring_parser.epydoc.parse,
)


def _parse(text: str) -> docstring_parser.Docstring:
    """The parse with the most entries (docstring-parser's AUTO rule, our parsers)."""
    best: docstring_parser.Docstring | None = None
    for parser in _PARSERS:
        try:
            parsed = parser(text)
        # A parser that trips over odd text (docstring-parser 0.18's reST parser raises
        # IndexError on ": :") just does not fit: another style, or plain text, will.
        except (docstring_parser.ParseError, IndexError, ValueError):
            continue
        if best is None or len(parsed.meta) > len(best.meta):
            best = parsed
    if best is None:
        raise docstring_parser.ParseError("no docstring style fits")
    return best


def _join(text: str) -> str:
    return " ".join(text.split())


def _first_paragraph(text: str) -> str:
    return _join(text.strip().split("\n\n", 1)[0])


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` from a docstring (see the module
    docs for the rules)."""
    if not doc:
        return "", {}
    if len(doc) > MAX_DOCSTRING_CHARS:
        # Cut at a line end, so the last entry kept is whole.
        doc = doc[: doc.rfind("\n", 0, MAX_DOCSTRING_CHARS) + 1 or MAX_DOCSTRING_CHARS]
    text = inspect.cleandoc(doc)
    try:
        parsed = _parse(text)
    except docstring_parser.ParseError:
        return _first_paragraph(text), {}
    params: dict[str, str] = {}
    for item in parsed.meta:
        if not isinstance(item, docstring_parser.DocstringParam):
            continue
        if not item.args or item.args[0] not in _PARAMETER_KINDS or not item.description:
            continue
        description = _join(item.description)
        for name in item.arg_name.split(","):
            name = name.strip().lstrip("*")
            if name and description:
                params.setdefault(name, description)
    return _first_paragraph(parsed.description or ""), params


__all__ = ["MAX_DOCSTRING_CHARS", "parse_docstring"]
