"""The planner server's wire format, both sides: what `POST /plan` takes and returns (`wamdiff serve` reads it,
the `http://` planner of `eval.planners` writes it). One home, so client and server cannot drift apart.

Request, either
- `Content-Type: application/json`: {"image": base64 PNG, "command": "left"|"straight"|"right"|"unknown",
  "velocity": [vx, vy], "acceleration": [ax, ay]} (m/s, m/s^2, ego frame at t0: x forward, y left), or the same
  with "images": [base64 PNG, ...] in place of "image": one per camera, in the model's order (a model whose prompt
  has several `<image>` placeholders takes that many, `GET /info` "n_images"; one camera may come either way); or
- `Content-Type: image/png`: the PNG bytes as the body (one camera), the rest as query parameters
  `?command=left&vx=..&vy=..&ax=..&ay=..`.
Each image must be an RGB PNG of the camera the model was trained with (its size is in `GET /info`).

Response (200): {"waypoints": [[x, y]] * 8 | null, "ok": bool, "reason": str, "text": raw model text,
"timing": {"queue_ms", "decode_ms", "total_ms", "batch_size", "forwards", "new_tokens", "tpf"}}. `ok` false: the
model answered but its text is no usable trajectory (a failed plan; `reason` says why, `text` is what it said).
Errors: 4xx for a bad request, 5xx when the model failed on this request; the body is {"error": one line}.

A request is checked before its images are decoded: the number of images must be the model's, and each PNG header
(IHDR) must declare the camera's size (or, with no size given, at most `MAX_IMAGE_PIXELS`), 8-bit RGB, so a small
file that inflates to gigabytes is refused unread.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from dataclasses import dataclass

import numpy as np

from wamdiff.driving.scene import COMMANDS, HISTORY_STEPS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_IMAGE_PIXELS = 1024 * 1024  # with no camera size to match: 3 MB decoded at most
PNG_COLOUR_TYPES = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}  # IHDR colour type -> the PIL mode it decodes to
TOKEN_ENV = "WAMDIFF_SERVE_TOKEN"  # the bearer token: `wamdiff serve` requires it, the `http://` planner sends it
MAX_NUMBER_CHARS = 64  # a number sent as text: longer is no measurement
MAX_SPEED = 60.0  # m/s per component (216 km/h): beyond it a value is most likely in the wrong unit
MAX_ACCEL = 20.0  # m/s^2 per component (2 g)
JSON_FIELDS = ("image", "command", "velocity", "acceleration")  # one camera; or "images" in place of "image"
IMAGES_FIELD = "images"
QUERY_FIELDS = ("command", "vx", "vy", "ax", "ay")


class BadRequest(ValueError):
    """A request the server refuses: `status` (4xx) and a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class PlanInput:
    """What the planner sees of one request: what `driving.prompts.scene_prompt` and a model planner read of a
    Scene (`command`, `image`, `ego_history[-1, 3:7]`), so a request is planned exactly as the scene it came from.
    A model that takes several cameras gets them all in `images` (the first is `image`)."""

    image: np.ndarray  # (H, W, 3) uint8, the first camera
    command: str
    velocity: tuple[float, float]
    acceleration: tuple[float, float]
    scene_id: str = "request"
    more_images: tuple = ()  # the other cameras, in the model's order

    @property
    def images(self) -> list[np.ndarray]:
        return [self.image, *self.more_images]

    @property
    def ego_history(self) -> np.ndarray:
        hist = np.zeros((HISTORY_STEPS, 7), np.float64)  # float64: the values as sent (the prompt rounds them)
        hist[-1, 3:5], hist[-1, 5:7] = self.velocity, self.acceleration
        return hist


# -- client side ----------------------------------------------------------------------------------------------
def encode_png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def scene_request(scene) -> dict:
    """The JSON body of `POST /plan` for a Scene (or a PlanInput): "image", or "images" when it holds several."""
    vx, vy, ax, ay = (float(v) for v in np.asarray(scene.ego_history, float)[-1, 3:7])
    images = list(getattr(scene, "images", None) or [scene.image])
    b64 = [base64.b64encode(encode_png(im)).decode("ascii") for im in images]
    return {**({"image": b64[0]} if len(b64) == 1 else {IMAGES_FIELD: b64}), "command": str(scene.command),
            "velocity": [vx, vy], "acceleration": [ax, ay]}


# -- server side ----------------------------------------------------------------------------------------------
def _number(value, field: str, bound: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadRequest(422, f"field {field}: expected a number, got {type(value).__name__}")
    if isinstance(value, str) and len(value) > MAX_NUMBER_CHARS:
        raise BadRequest(422, f"field {field}: a number of {len(value)} characters (at most {MAX_NUMBER_CHARS})")
    try:
        v = float(value)
    except ValueError:
        raise BadRequest(422, f"field {field}: {value[:40]!r} is not a number") from None
    except OverflowError:  # an integer beyond float's range
        raise BadRequest(422, f"field {field}: out of range [-{bound:g}, {bound:g}]") from None
    if not math.isfinite(v):
        raise BadRequest(422, f"field {field}: {value!r} is not finite")
    if abs(v) > bound:
        raise BadRequest(422, f"field {field}: {v:g} is out of range [-{bound:g}, {bound:g}]")
    return v


def _pair(value, field: str, bound: float) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise BadRequest(422, f"field {field}: expected [x, y] (two numbers), got {json.dumps(value)[:40]}")
    return _number(value[0], f"{field}[0]", bound), _number(value[1], f"{field}[1]", bound)


def _command(value) -> str:
    if value not in COMMANDS:
        raise BadRequest(422, f"field command: {str(value)[:40]!r} is not one of {', '.join(COMMANDS)}")
    return value


def png_header(png: bytes, field: str = "image") -> tuple[int, int, int, int]:
    """(width, height, bit depth, colour type) from a PNG's IHDR chunk, read without decoding a pixel."""
    if not png.startswith(PNG_SIGNATURE):
        raise BadRequest(400, f"field {field}: not a PNG (no PNG signature)")
    ihdr = png[len(PNG_SIGNATURE): len(PNG_SIGNATURE) + 8 + 13]  # length, type, then the 13 header bytes
    if len(ihdr) < 21 or ihdr[4:8] != b"IHDR":
        raise BadRequest(400, f"field {field}: undecodable PNG (no IHDR header chunk first)")
    width, height = int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
    return width, height, ihdr[16], ihdr[17]


def check_png(png: bytes, size: int | None, field: str = "image") -> tuple[int, int]:
    """(width, height) of a PNG whose header passes the checks (8-bit RGB, the camera's size or at most
    MAX_IMAGE_PIXELS); BadRequest otherwise. Reads the header only."""
    width, height, depth, colour = png_header(png, field)
    if colour != 2 or depth != 8:
        kind = PNG_COLOUR_TYPES.get(colour, f"colour type {colour}") + ("" if depth == 8 else f" {depth}-bit")
        raise BadRequest(422, f"field {field}: PNG mode {kind}, expected RGB (8-bit)")
    if size is not None and (width, height) != (size, size):
        raise BadRequest(422, f"field {field}: {width}x{height} pixels, the model's camera takes {size}x{size}")
    if width * height > MAX_IMAGE_PIXELS or not width or not height:
        raise BadRequest(422, f"field {field}: {width}x{height} pixels (at most {MAX_IMAGE_PIXELS} pixels)")
    return width, height


def decode_image(png: bytes, size: int | None, field: str = "image") -> np.ndarray:
    """The RGB image of PNG bytes; `size`: the side the model's camera has (None: any, up to MAX_IMAGE_PIXELS).
    The header is checked first, so only an image of the accepted size and kind is ever decoded. `field`: where the
    image came from, for the one-line reason ("image", "images[1]")."""
    from PIL import Image, UnidentifiedImageError

    width, height = check_png(png, size, field)
    try:
        with Image.open(io.BytesIO(png)) as im:
            im.load()
            mode, arr = im.mode, np.asarray(im)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise BadRequest(400, f"field {field}: undecodable PNG ({' '.join(str(err).split())[:80]})") from None
    if mode != "RGB" or arr.shape[:2] != (height, width):  # PIL read the same header: a mismatch is a broken file
        raise BadRequest(400, f"field {field}: undecodable PNG (decoded as {mode} {arr.shape[1]}x{arr.shape[0]})")
    return np.ascontiguousarray(arr, np.uint8)


def _check_fields(given, expected: tuple[str, ...], what: str) -> None:
    """Every expected field present and no other (a typo is a 422, never silently ignored)."""
    missing = [f for f in expected if f not in given]
    unknown = sorted(set(given) - set(expected))
    for names, word in ((missing, "missing"), (unknown, "unknown")):
        if names:
            raise BadRequest(422, f"{word} {what}(s) {', '.join(names)} (a request has {', '.join(expected)})")


def _camera_count(given: int, n_images: int, field: str) -> None:
    if given != n_images:
        raise BadRequest(422, f"field {field}: {given} camera image(s), the model takes {n_images} (one per <image> of "
                              f"its prompt, in its order; GET /info n_images)")


def _png_field(value, field: str) -> bytes:
    if not isinstance(value, str):
        raise BadRequest(422, f"field {field}: expected a base64 string of PNG bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(400, f"field {field}: not valid base64") from None


def parse_json_request(body: bytes, size: int | None, n_images: int = 1) -> PlanInput:
    """`n_images`: the camera images the model takes (`GET /info` n_images): "image" carries one, "images" a list."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON (nested too deeply)") from None
    except ValueError as err:  # JSONDecodeError, bad UTF-8, an integer of more digits than Python converts
        raise BadRequest(400, f"body is not valid JSON ({' '.join(str(err).split())[:120]})") from None
    if not isinstance(data, dict):
        raise BadRequest(400, f"body must be a JSON object with fields {', '.join(JSON_FIELDS)}")
    if IMAGES_FIELD in data and "image" in data:
        raise BadRequest(422, f"fields image and {IMAGES_FIELD} both given: send one camera as image, or every "
                              f"camera as {IMAGES_FIELD}")
    several = IMAGES_FIELD in data
    _check_fields(data, (IMAGES_FIELD, *JSON_FIELDS[1:]) if several else JSON_FIELDS, "field")
    if several:
        if not isinstance(data[IMAGES_FIELD], list):
            raise BadRequest(422, f"field {IMAGES_FIELD}: expected a list of base64 PNG strings, one per camera")
        _camera_count(len(data[IMAGES_FIELD]), n_images, IMAGES_FIELD)
        pngs = [(_png_field(v, f"{IMAGES_FIELD}[{k}]"), f"{IMAGES_FIELD}[{k}]") for k, v in enumerate(data[IMAGES_FIELD])]
    else:
        _camera_count(1, n_images, "image")
        pngs = [(_png_field(data["image"], "image"), "image")]
    command = _command(data["command"])
    velocity = _pair(data["velocity"], "velocity", MAX_SPEED)
    acceleration = _pair(data["acceleration"], "acceleration", MAX_ACCEL)
    for png, field in pngs:  # every header before any pixel
        check_png(png, size, field)
    images = [decode_image(png, size, field) for png, field in pngs]
    return PlanInput(images[0], command, velocity, acceleration, more_images=tuple(images[1:]))


def parse_png_request(body: bytes, query: dict, size: int | None, n_images: int = 1) -> PlanInput:
    _check_fields(query, QUERY_FIELDS, "query parameter")
    if n_images != 1:
        raise BadRequest(422, f"Content-Type image/png carries one camera image, the model takes {n_images}: send "
                              f"application/json with \"{IMAGES_FIELD}\": [base64 PNG, ...] (GET /info n_images)")
    velocity = (_number(query["vx"], "vx", MAX_SPEED), _number(query["vy"], "vy", MAX_SPEED))
    acceleration = (_number(query["ax"], "ax", MAX_ACCEL), _number(query["ay"], "ay", MAX_ACCEL))
    return PlanInput(decode_image(body, size), _command(query["command"]), velocity, acceleration)


def parse_request(content_type: str, body: bytes, query: dict, size: int | None, n_images: int = 1) -> PlanInput:
    """A validated PlanInput, or BadRequest(4xx, one-line reason). `n_images`: the camera images the model takes."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(413, f"body of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    if kind == "application/json":
        return parse_json_request(body, size, n_images)
    if kind == "image/png":
        return parse_png_request(body, query, size, n_images)
    raise BadRequest(415, f"Content-Type {kind or '(none)'!r}: send application/json (base64 image) or image/png")


# -- responses ------------------------------------------------------------------------------------------------
def plan_response(plan, timing: dict) -> dict:
    """The JSON of a Plan (`eval.planners.Plan`) with its timing."""
    return {"waypoints": None if plan.xy is None else np.asarray(plan.xy, float).tolist(), "ok": bool(plan.ok),
            "reason": plan.reason, "text": plan.text, "timing": timing}
