"""What @tool takes from a docstring: the styles understood, the rules applied to
docstring-parser's result, and the bounds."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from emelex.tools import tool
from emelex.tools._docstring import MAX_DOCSTRING_CHARS, parse_docstring


@pytest.mark.parametrize(
    "doc",
    [
        # Google, with every parameter header emelex has always read.
        *(
            f"Look things up.\n\n{header}:\n    query (str): What to find,\n"
            "        in words.\n    *limit: Most results.\n"
            for header in (
                "Args",
                "Arguments",
                "Parameters",
                "Params",
                "Keyword Args",
                "Keyword Arguments",
                "Other Parameters",
            )
        ),
        # NumPy, including the other parameter sections.
        *(
            f"Look things up.\n\n{header}\n{'-' * len(header)}\nquery : str\n"
            "    What to find,\n    in words.\nlimit : int\n    Most results.\n"
            for header in ("Parameters", "Other Parameters", "Keyword Arguments")
        ),
        # reST and Epydoc, which the library adds.
        "Look things up.\n\n:param query: What to find,\n    in words.\n"
        ":param int limit: Most results.\n",
        "Look things up.\n\n@param query: What to find, in words.\n@param limit: Most results.\n",
    ],
)
def test_styles_give_the_summary_and_parameter_descriptions(doc: str) -> None:
    assert parse_docstring(doc) == (
        "Look things up.",
        {"query": "What to find, in words.", "limit": "Most results."},
    )


def test_the_description_is_the_whole_first_paragraph() -> None:
    doc = """Look things up
    across the catalogue.

    More detail that the model does not need.

    Args:
        query: What to find.
    """
    assert parse_docstring(doc) == (
        "Look things up across the catalogue.",
        {"query": "What to find."},
    )
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("") == ("", {})


def test_shared_entries_first_mentions_and_malformed_entries() -> None:
    numpy = "Scale.\n\nParameters\n----------\nx, y : float\n    The factors.\n"
    assert parse_docstring(numpy)[1] == {"x": "The factors.", "y": "The factors."}
    google = (
        "Do it.\n\nArgs:\n    a: first\n    no colon in this entry\n    b: second\n"
        "\nKeyword Args:\n    a: again\n\nReturns:\n    c: not a parameter\n"
    )
    assert parse_docstring(google) == ("Do it.", {"a": "first", "b": "second"})


def test_a_huge_docstring_is_cut_at_a_line_end() -> None:
    entries = "".join(f"    p{i}: about p{i}\n" for i in range(MAX_DOCSTRING_CHARS // 10))
    summary, params = parse_docstring("Many.\n\nArgs:\n" + entries)
    assert summary == "Many." and 1_000 < len(params) < MAX_DOCSTRING_CHARS // 10
    # Every kept entry is whole: the cut never leaves a half description behind.
    assert all(text == f"about {name}" for name, text in params.items())


@settings(max_examples=200, deadline=None)
@example(": :")  # docstring-parser 0.18 raised IndexError on it
@given(st.text(alphabet=st.sampled_from("Args:Parameters-\n *xy,()@param"), max_size=300))
def test_any_docstring_parses_without_raising(doc: str) -> None:
    summary, params = parse_docstring(doc)
    assert "\n" not in summary
    assert all(name and "\n" not in text for name, text in params.items())


def test_the_tool_uses_the_parsed_docstring() -> None:
    @tool
    async def look(query: str, limit: int = 3) -> str:
        """Look things up.

        :param query: What to find.
        :param limit: Most results.
        """
        return query

    assert look.description == "Look things up."
    properties = look.parameters["properties"]
    assert properties["query"]["description"] == "What to find."
    assert properties["limit"]["description"] == "Most results."
