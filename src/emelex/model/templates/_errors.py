"""Errors raised while loading, probing or rendering a chat template."""

from __future__ import annotations

from emelex.model._errors import InvalidRequest, ModelError


class ChatTemplateError(ModelError):
    """A chat template could not be compiled, or failed while rendering a conversation.

    When the template itself refused the conversation (``raise_exception`` in the
    template), :attr:`raised_by_template` is True and the message is the template's own.
    """

    def __init__(self, message: str, *, raised_by_template: bool = False) -> None:
        super().__init__(message)
        self.raised_by_template = raised_by_template


class ChatTemplateMissing(ChatTemplateError):
    """The model file embeds no ``tokenizer.chat_template`` and none was supplied.

    The message names the file and how to supply one (``chat_template=`` with the
    template's Jinja text or a path to a ``.jinja`` file).
    """


class UnsupportedContent(InvalidRequest):
    """A message holds content the prompt format cannot carry (e.g. an image for a
    text-only template)."""
