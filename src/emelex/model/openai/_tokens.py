"""Counting tokens with the served model's own tokenizer, over HTTP.

llama-cpp-python's server answers ``POST /extras/tokenize/count`` with
``{"count": n}`` for ``{"input": text}``; it tokenizes as a prompt, so the count includes
the tokens the tokenizer adds to every text (BOS). That fixed part is measured once, by
counting the empty string, and subtracted.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import httpx

from emelex.model.openai._errors import HTTPStatusError, OpenAIError, ResponseTooLarge

LLAMA_CPP_PYTHON_COUNT_PATH: Final = "/extras/tokenize/count"
"""Where llama-cpp-python's server counts tokens (beside ``/v1``, not under it)."""

_MAX_BODY: Final = 64 * 1024
_VERSION_SUFFIX: Final = re.compile(r"/v\d+[a-z0-9]*/?$")


def server_root(base_url: str) -> str:
    """``base_url`` without its API version suffix (``.../v1`` -> ``...``)."""
    return _VERSION_SUFFIX.sub("", base_url).rstrip("/")


class ServerTokenCounter:
    """A :class:`~emelex.model.TokenCounter` that asks a llama-cpp-python server.

    ``url`` is the counting endpoint, ``http_client`` the client to send with (not
    closed here), ``model`` the alias sent along (servers with several models need it)
    and ``timeout`` the seconds one count may take. Failures raise an
    :class:`OpenAIError`; after one, later counts fail at once without a request (a
    server without the endpoint is not asked twice).
    """

    def __init__(
        self,
        url: str,
        *,
        http_client: httpx.AsyncClient,
        model: str | None = None,
        headers: httpx.Headers | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(http_client, httpx.AsyncClient):
            raise OpenAIError(f"http_client must be an httpx.AsyncClient, got {http_client!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise OpenAIError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if math.isinf(timeout):
            raise OpenAIError("timeout must be finite")
        self._url = url
        self._client = http_client
        self._model = model
        self._headers = headers
        self._timeout = httpx.Timeout(float(timeout))
        self._fixed: int | None = None
        self._failure: OpenAIError | None = None

    @property
    def url(self) -> str:
        return self._url

    async def count_tokens(self, text: str) -> int:
        """The tokens of ``text``, without the tokenizer's fixed BOS-like prefix."""
        if self._failure is not None:
            raise OpenAIError(f"token counting is off after an earlier failure: {self._failure}")
        try:
            if self._fixed is None:
                self._fixed = await self._ask("")
            return max(0, await self._ask(text) - self._fixed)
        except OpenAIError as exc:
            self._failure = exc
            raise

    async def _ask(self, text: str) -> int:
        body: dict[str, Any] = {"input": text}
        if self._model is not None:
            body["model"] = self._model
        headers = {"Content-Type": "application/json"}
        if self._headers is not None:
            headers = {**dict(self._headers), **headers}
        request = self._client.build_request(
            "POST",
            self._url,
            content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
            headers=headers,
            timeout=self._timeout,
        )
        try:
            response = await self._client.send(request, stream=True)
            try:
                data = bytearray()
                async for piece in response.aiter_bytes():
                    data += piece
                    if len(data) > _MAX_BODY:
                        raise ResponseTooLarge("max_count_bytes", _MAX_BODY, len(data))
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise OpenAIError(f"counting tokens at {self._url} failed ({exc!r})") from exc
        if response.status_code != 200:
            excerpt = bytes(data[:500]).decode("utf-8", "replace")
            raise HTTPStatusError(response.status_code, excerpt, None)
        try:
            count = json.loads(data)["count"]
        except (ValueError, KeyError, TypeError) as exc:
            raise OpenAIError(f"{self._url} answered without a token count") from exc
        if type(count) is not int or count < 0:
            raise OpenAIError(f"{self._url} answered an invalid token count: {count!r}")
        return count

    def __repr__(self) -> str:
        return f"ServerTokenCounter({self._url!r})"
