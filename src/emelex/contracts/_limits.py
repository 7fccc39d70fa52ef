"""The bounds every Host enforces on wire values (a client may rely on them)."""

from typing import Final

#: Rows in one history page; items in one search, diagnostics or queue page.
MAX_PAGE_SIZE: Final = 500
#: Hits in one search page (a page ends early, at a row boundary, when it fills up).
MAX_SEARCH_HITS: Final = 10_000
#: Code points in one search query.
MAX_QUERY_CHARS: Final = 1024
#: Code points in a name (agent, attachment, tool) or a title.
MAX_NAME_CHARS: Final = 255
#: Code points in an identifier (session, invocation, operation reference ...).
MAX_ID_CHARS: Final = 128
#: Code points in the text of one send, task or Executor request.
MAX_TEXT_CHARS: Final = 1_000_000
#: Code points in a row field (body, thinking) returned by history.
MAX_FIELD_CHARS: Final = 16_000_000
#: Code points in a safe diagnostic message or a denial reason.
MAX_MESSAGE_CHARS: Final = 4096
#: Attachments in one Executor request and their total size in bytes.
MAX_ATTACHMENTS: Final = 64
MAX_ATTACHMENT_BYTES: Final = 256 * 1024 * 1024
#: Tools named by an agent, a fork narrowing or a prepared request.
MAX_TOOLS: Final = 256
#: Workers one WorkHub coordinator holds at a time; entries in one queue.
MAX_WORKERS: Final = 64
MAX_QUEUE_ENTRIES: Final = 1024
#: Invocations that ended with nothing committed a queue snapshot still shows (the
#: newest), and the code points of each one's prompt it keeps.
MAX_SETTLED_INVOCATIONS: Final = 32
MAX_SETTLED_TEXT_CHARS: Final = 2000
#: Largest sequence/offset number on the wire (JSON-safe integers).
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: Code points of answer (or reasoning) text one live draft update carries at most: a
#: draft further ahead of its watcher arrives in several updates (each frame stays small).
MAX_DRAFT_CHUNK_CHARS: Final = 4096
