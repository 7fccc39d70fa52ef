"""Chat templates: sandboxed rendering and capability proofs.

:func:`probe_chat_template` renders probe conversations with sentinel strings through
a model's exact chat template and records, per feature, whether it is proven present
or proven absent (see :class:`~emelex.model.Capabilities`), together with the tool-call
markup and reasoning tags the template's model family uses. The resulting
:class:`ChatFormat` renders real conversations the same way. Pure: no model, no I/O.
Needs ``jinja2`` (the ``local`` extra).
"""

from emelex._facade import fix_module_names
from emelex.model.templates._errors import (
    ChatTemplateError,
    ChatTemplateMissing,
    UnsupportedContent,
)
from emelex.model.templates._format import (
    ChatFormat,
    RenderedPrompt,
    RenderStyle,
    ThinkMarkers,
    ToolCallFamily,
    message_dicts,
    short_call_id,
    tool_dicts,
)
from emelex.model.templates._jinja import ChatTemplate
from emelex.model.templates._probe import probe_chat_template

__all__ = [
    "ChatFormat",
    "ChatTemplate",
    "ChatTemplateError",
    "ChatTemplateMissing",
    "RenderStyle",
    "RenderedPrompt",
    "ThinkMarkers",
    "ToolCallFamily",
    "UnsupportedContent",
    "message_dicts",
    "probe_chat_template",
    "short_call_id",
    "tool_dicts",
]

fix_module_names(__name__, globals())
