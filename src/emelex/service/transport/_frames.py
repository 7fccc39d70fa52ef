"""Update frames of subscriptions, encoded once however many watchers receive them.

The Host hands the very same update object to every watcher of a session, and a client
process may hold many watches of one session: a small cache keyed by the update's
identity (server) or by the frame's text (client) turns N encodings or decodings into
one. Identity, not equality: hashing a page of rows costs about as much as encoding it,
and a watch catching up gets pages nobody else does. The values are frozen, so sharing
one decoded object between watchers is safe.

Encodings too large for the cache are shared only while they are being sent: each
sender holds a :class:`Lease` on the update until its frame is out, and the encoding
lives as long as the last lease (idle watchers of a large catch-up page all hold one).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

from emelex.contracts import encode_trusted
from emelex.service.transport._json import dump_fast

#: Distinct frames each cache keeps (the newest); larger frames are not cached.
CACHED_FRAMES: Final = 32
MAX_CACHED_TEXT: Final = 256 * 1024
#: A batch frame stops growing past this many characters (one update may exceed it).
BATCH_TEXT: Final = 1024 * 1024


class FrameCache:
    """A bounded least-recently-used map."""

    def __init__(self, size: int = CACHED_FRAMES) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self._items[key] = value
        if len(self._items) > self._size:
            self._items.popitem(last=False)


class _Encoded:
    """One update's wire JSON, and its single-update frames once asked for (the same
    ``str`` objects for every watcher, so the socket layer frames each once too)."""

    __slots__ = ("batch", "frame", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.frame: str | None = None
        self.batch: str | None = None


#: id(update) -> (update, its encoding). An entry holds its update, so the id cannot be
#: reused while the entry lives.
_ENCODED = FrameCache()
#: The ids of a batch's updates -> (the updates, the batch frame).
_BATCHES = FrameCache()


class Lease:
    """A large encoding (too large for the cache) held while its senders send it: every
    watcher sending the same update object then shares one encoding and one frame (a
    catch-up page shared by idle watchers, see the Host's _catch_up, costs one copy,
    not one per watcher). The last sender's :meth:`release` lets it go."""

    __slots__ = ("encoded", "senders", "update")

    def __init__(self, update: Any, encoded: _Encoded) -> None:
        self.update = update
        self.encoded = encoded
        self.senders = 1

    def release(self) -> None:
        self.senders -= 1
        if self.senders == 0 and _LEASED.get(id(self.update)) is self:
            del _LEASED[id(self.update)]


#: id(update) -> its lease; a lease holds its update, so the id cannot be reused meanwhile.
_LEASED: dict[int, Lease] = {}


def hold(update: Any) -> Lease | None:
    """Hold the encoding of ``update`` for one sender until it releases the lease
    (after sending the update's frame); None for a small one, which is cached anyway."""
    lease = _LEASED.get(id(update))
    if lease is not None and lease.update is update:
        lease.senders += 1
        return lease
    encoded = _encoded(update)
    if len(encoded.text) <= MAX_CACHED_TEXT:
        return None
    lease = _LEASED[id(update)] = Lease(update, encoded)
    return lease


def hold_all(updates: list[Any]) -> list[Lease]:
    """:func:`hold` of each of ``updates``: the leases to release."""
    return [lease for update in updates if (lease := hold(update)) is not None]


def _encoded(update: Any) -> _Encoded:
    entry: tuple[Any, _Encoded] | None = _ENCODED.get(id(update))
    if entry is not None and entry[0] is update:
        return entry[1]
    lease = _LEASED.get(id(update))
    if lease is not None and lease.update is update:
        return lease.encoded
    found = _Encoded(dump_fast(encode_trusted(update)))
    if len(found.text) <= MAX_CACHED_TEXT:
        _ENCODED.put(id(update), (update, found))
    return found


def update_text(update: Any) -> str:
    """The wire JSON of ``update``."""
    return _encoded(update).text


def update_frame(update: Any) -> str:
    """The text frame ``{"update": <wire update>}`` of ``update``."""
    encoded = _encoded(update)
    if encoded.frame is None:
        encoded.frame = '{"update":' + encoded.text + "}"
    return encoded.frame


def batch_frame(updates: list[Any]) -> str:
    """The text frame ``{"updates": [<wire update>, ...]}``."""
    if len(updates) == 1:
        encoded = _encoded(updates[0])
        if encoded.batch is None:
            encoded.batch = '{"updates":[' + encoded.text + "]}"
        return encoded.batch
    # Watchers that keep up equally take the same updates at once: one text for all.
    key = tuple(map(id, updates))
    entry: tuple[tuple[Any, ...], str] | None = _BATCHES.get(key)
    if entry is not None and all(a is b for a, b in zip(entry[0], updates, strict=True)):
        return entry[1]
    text = '{"updates":[' + ",".join(update_text(u) for u in updates) + "]}"
    if len(text) <= MAX_CACHED_TEXT:
        _BATCHES.put(key, (tuple(updates), text))
    return text


def batch_frames(updates: list[Any]) -> list[str]:
    """``updates`` as batch frames in order, each at most ``BATCH_TEXT`` characters
    unless a single update is larger: a watch catching up through many pages gets
    frames of a bounded size, not one frame of every page waiting."""
    groups: list[list[Any]] = [[]]
    size = 0
    for update in updates:
        length = len(update_text(update))
        if groups[-1] and size + length > BATCH_TEXT:
            groups.append([])
            size = 0
        groups[-1].append(update)
        size += length
    return [batch_frame(group) for group in groups]
