"""What stands between a client and the model: the server's limits, the bounded body read, the in-flight cap and
the bearer token.

- `ServerLimits`: body bytes, the read timeout (headers and body each must arrive within it), the keep-alive timeout
  (an idle connection is closed), the plan requests in flight at once (beyond: 503 + Retry-After, nothing queues
  without bound), the bearer token.
- `read_body`: the body counted while it streams (a chunked body past the limit is refused at the limit, not read
  whole) and bounded in time (a half-sent body is a 408, not a held connection).
- `InFlight`: the cap, taken before a byte of the body is read.
- `require_token` / `is_loopback`: a server bound beyond loopback answers only requests with its token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from dataclasses import dataclass

from wamdiff.eval.wire import MAX_BODY_BYTES, BadRequest


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout_s: float = 10.0  # a request's headers, and then its body, each within this
    keep_alive_s: float = 5.0  # an idle kept-alive connection is closed after this
    max_in_flight: int = 32  # plan requests being read, queued or decoded at once; more: 503
    token: str | None = None  # required as `Authorization: Bearer <token>` on everything but /health and the docs

    def __post_init__(self) -> None:
        if not 0 < int(self.max_body_bytes) <= MAX_BODY_BYTES:
            raise ValueError(f"max_body_bytes {self.max_body_bytes}: must lie in [1, {MAX_BODY_BYTES}]")
        for name in ("read_timeout_s", "keep_alive_s"):
            if not 0 < float(getattr(self, name)) <= 3600:
                raise ValueError(f"--{name[:-2].replace('_', '-')} {getattr(self, name)}: must lie in (0, 3600] seconds")
        if int(self.max_in_flight) < 1:
            raise ValueError(f"--max-in-flight {self.max_in_flight}: must be at least 1")
        if self.token is not None and len(self.token) < 16:
            raise ValueError("--token: at least 16 characters (omit it to have one generated)")


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve beyond loopback
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def token_matches(header: str | None, token: str | None) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time; always true when no token is set."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode())


DRAIN_BYTES = 2 * MAX_BODY_BYTES  # how much of a refused body is read (and dropped) before the 413


async def read_body(request, limits: ServerLimits) -> bytes:
    """The request body, or BadRequest: 413 for a body over the limit (declared or streamed), 408 when it has not
    fully arrived within the read timeout. A refused body is still read and dropped, up to `DRAIN_BYTES` in all:
    closing a connection with unread bytes in it resets it, and the reset can reach the client before the 413 does
    (a larger body is cut off there, reset and all)."""
    declared = request.headers.get("content-length", "")
    too_large = declared.isdigit() and int(declared) > limits.max_body_bytes
    chunks, size = [], 0
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > DRAIN_BYTES:
                    break
                if not too_large and size <= limits.max_body_bytes:
                    chunks.append(chunk)
    except TimeoutError:
        if not too_large and size <= limits.max_body_bytes:
            raise BadRequest(408, f"the body did not arrive within {limits.read_timeout_s:g} s "
                                  f"({size} bytes came)") from None
    if too_large:
        raise BadRequest(413, f"body of {declared} bytes exceeds {limits.max_body_bytes}")
    if size > limits.max_body_bytes:
        raise BadRequest(413, f"body exceeds {limits.max_body_bytes} bytes (refused while it streamed)")
    return b"".join(chunks)


class InFlight:
    """At most `cap` plan requests at once (the event loop's only: no lock needed); `try_enter` is False when full."""

    def __init__(self, cap: int):
        self.cap, self.count = int(cap), 0

    def try_enter(self) -> bool:
        if self.count >= self.cap:
            return False
        self.count += 1
        return True

    def leave(self) -> None:
        self.count -= 1
