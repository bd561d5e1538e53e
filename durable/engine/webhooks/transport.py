"""The one place that talks HTTP: an aiohttp session behind a small interface.

`HttpTransport.send` performs one exchange and answers an `HttpReply`
(status, and a preview of the body when the status is not 2xx), or raises
`TransportFailure` for anything that kept the exchange from completing
(connection refused, DNS, TLS, a protocol error, the timeout). Redirects are
not followed: a 3xx is the receiver's answer. One `aiohttp.ClientSession`
per transport, opened on first use and closed by `HttpTransport.aclose`.
aiohttp is imported on first use too: most processes never send a webhook,
and importing it costs a child process a fifth of a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

__all__ = ["PREVIEW_CHARS", "HttpReply", "HttpTransport", "TransportFailure"]

#: Characters of a non-2xx response body kept for the error message.
PREVIEW_CHARS = 200
# Enough bytes for PREVIEW_CHARS characters of UTF-8.
_PREVIEW_BYTES = 4 * PREVIEW_CHARS


@dataclass(frozen=True, slots=True)
class HttpReply:
    """The receiver's answer: its status and, unless 2xx, the start of its body."""

    status: int
    preview: str = ""


class TransportFailure(Exception):
    """The exchange did not complete (connect, TLS, protocol, timeout)."""


class HttpTransport:
    """Sends webhook requests over one aiohttp session."""

    def __init__(self, user_agent: str) -> None:
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the webhook transport is closed")
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(headers={"User-Agent": self._user_agent})
        return self._session

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,  # noqa: ASYNC109
    ) -> HttpReply:
        """Send one request; `TransportFailure` if no response came back in ``timeout`` s."""
        import aiohttp
        from multidict import CIMultiDict

        session = self._open()
        try:
            async with session.request(
                method,
                url,
                headers=CIMultiDict(headers),
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    return HttpReply(status)
                return HttpReply(status, await _preview(response))
        except TimeoutError:
            raise TransportFailure(f"timed out after {timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise TransportFailure(f"transport error: {str(e) or type(e).__name__}") from e

    async def aclose(self) -> None:
        """Close the session (idempotent); later sends raise `RuntimeError`."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def _preview(response: aiohttp.ClientResponse) -> str:
    """The first `PREVIEW_CHARS` characters of the body; "" if it cannot be read."""
    import aiohttp

    chunks: list[bytes] = []
    size = 0
    try:
        while size < _PREVIEW_BYTES:
            chunk = await response.content.read(_PREVIEW_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (aiohttp.ClientError, TimeoutError):
        pass
    return b"".join(chunks).decode("utf-8", errors="replace")[:PREVIEW_CHARS]
