"""The server's request and response bodies as pydantic models: the OpenAPI schema at `/docs` and `/openapi.json`,
and the check of every response the server sends (FastAPI validates a route's return value against its model).

Requests are parsed by `eval.wire.parse_request` (the wire format's one home, shared with the `http://` client, with
one-line reasons a schema error would not give); `PlanRequest` describes the same fields, and
`tests/test_serve.py` holds the two together.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from wamdiff.driving.scene import COMMANDS
from wamdiff.eval.wire import MAX_ACCEL, MAX_SPEED

Command = Literal[COMMANDS]  # type: ignore[valid-type]


class PlanRequest(BaseModel):
    """`POST /plan` as `application/json` with `image` or `images` (or send one camera's PNG as an `image/png` body
    with `?command=&vx=&vy=&ax=&ay=`)."""

    model_config = ConfigDict(extra="forbid")
    image: Optional[str] = Field(None, description="Base64 of an 8-bit RGB PNG of the model's camera size "
                                                   "(`GET /info` camera.size): one camera. Or send `images`.")
    images: Optional[list[str]] = Field(None, description="One base64 PNG per camera, in the model's order (as many as "
                                                          "`GET /info` n_images), in place of `image`.")
    command: Command = Field(description="The route command.")
    velocity: tuple[float, float] = Field(description=f"Ego velocity [vx, vy] in m/s (ego frame: x forward, y left), "
                                                      f"each within +-{MAX_SPEED:g}.")
    acceleration: tuple[float, float] = Field(description=f"Ego acceleration [ax, ay] in m/s^2, each within +-{MAX_ACCEL:g}.")


class PlanTiming(BaseModel):
    queue_ms: float
    decode_ms: float
    total_ms: float
    batch_size: int
    forwards: int
    new_tokens: int
    tpf: Optional[float] = Field(description="Tokens per forward.")


class PlanResponse(BaseModel):
    waypoints: Optional[list[tuple[float, float]]] = Field(
        description="8 waypoints [x, y] in metres, 0.5 s apart (null when the model's answer is no trajectory).")
    ok: bool = Field(description="False: the model answered but its text is no usable trajectory (`reason` says why).")
    reason: str
    text: str = Field(description="The model's raw answer.")
    timing: PlanTiming


class ErrorBody(BaseModel):
    error: str = Field(description="One line: what is wrong and where.")


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")  # the batcher's counters ride along
    status: Literal["ok"]
    waiting: int = Field(description="Requests queued for the decoder.")
    in_flight: int = Field(description="Plan requests being read, queued or decoded.")


ERRORS = {code: {"model": ErrorBody, "description": text} for code, text in [
    (400, "Malformed body (not JSON, not base64, not a PNG, ...)."),
    (401, "Missing or wrong bearer token (a server bound beyond loopback requires one)."),
    (408, "The body did not arrive within the read timeout."),
    (413, "Body larger than the limit."),
    (415, "Unsupported Content-Type."),
    (422, "A field out of range, missing or unknown; an image of the wrong size or kind."),
    (500, "The model failed on this request."),
    (503, "Overloaded: too many requests in flight; retry after `Retry-After` seconds."),
]}
