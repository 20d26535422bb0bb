"""The HTTP face of the planner server (FastAPI): `POST /plan`, `GET /health`, `GET /info`, `GET /metrics`, and the
OpenAPI docs at `/docs` (schemas: `serve.schemas`).

A plan request passes, in order: the bearer token (when the server has one), the in-flight cap (full: 503 with
Retry-After, before a byte of the body is read), the bounded body read (`guards.read_body`: 413 past the limit, the
rest of the body drained up to a bound, 408 past the read timeout), the parse (`eval.wire.parse_request`, in a worker
thread so the event loop keeps answering; the PNG header is checked before any pixel is decoded), the
`DynamicBatcher`. A client that leaves while its request waits has it cancelled (never decoded). A bad request is a
4xx with one line and never reaches the model; a model failure is a 500 for the requests it failed on only; any other
unexpected error is a 500 for that request, and the server keeps serving. Every error body is {"error": one line}.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from wamdiff.errors import one_line
from wamdiff.eval.wire import BadRequest, parse_request, plan_response
from wamdiff.serve.batcher import BatchingConfig, DynamicBatcher
from wamdiff.serve.guards import InFlight, ServerLimits, read_body, token_matches
from wamdiff.serve.metrics import ServerMetrics
from wamdiff.serve.schemas import ERRORS, Health, PlanRequest, PlanResponse
from wamdiff.serve.server import running_server  # noqa: F401 - a server in a thread, imported from here by tests

RETRY_AFTER_S = 1
ROUTES = ("/plan", "/health", "/info", "/metrics", "/docs", "/openapi.json")
PLAN_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": PlanRequest.model_json_schema()},
    "image/png": {"schema": {"type": "string", "format": "binary",
                             "description": "The PNG itself; command, vx, vy, ax, ay as query parameters."}}}}}


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": one_line(message)[:500]}, status_code=status, headers=headers)


class CountResponses:
    """ASGI middleware: every answer counted by route and status (unknown paths pooled, so a scan adds no series)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in ROUTES else "other"

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (after the body was read, `receive` only reports that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(engine, batching: BatchingConfig | None = None, *, batcher: DynamicBatcher | None = None,
               limits: ServerLimits | None = None):
    """The FastAPI app serving `engine` (a `PlannerEngine`, or anything with `plan`, `info` and `image_size`; its
    `n_images`, the camera images a request carries, defaults to one)."""
    limits = limits or ServerLimits()
    gate = InFlight(limits.max_in_flight)
    batcher = batcher or DynamicBatcher(engine.plan, batching or BatchingConfig(), start=False)
    metrics = ServerMetrics(lambda: batcher.waiting, lambda: gate.count)
    batcher.on_batch = metrics.on_batch
    bearer = HTTPBearer(auto_error=False, description="Required when the server listens beyond loopback.")

    async def require_token(request: Request, _: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if not token_matches(request.headers.get("authorization"), limits.token):
            raise HTTPException(401, "missing or wrong bearer token (send Authorization: Bearer <token>; "
                                     "`wamdiff serve` printed it at start)", headers={"WWW-Authenticate": "Bearer"})

    @asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        yield
        await asyncio.to_thread(batcher.stop)

    app = FastAPI(title="wamdiff planner server", lifespan=lifespan, docs_url="/docs", redoc_url=None,
                  description="Camera PNG + route command + ego velocity / acceleration -> 8 waypoints. Concurrent "
                              "requests are decoded together (dynamic batching).")
    app.state.batcher, app.state.engine, app.state.limits, app.state.metrics = batcher, engine, limits, metrics
    app.add_middleware(CountResponses, metrics=metrics)
    guarded = [Depends(require_token)]

    @app.exception_handler(HTTPException)
    async def http_error(_request, err: HTTPException):
        return _error(err.status_code, str(err.detail), getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request, err: RequestValidationError):
        return _error(422, str(err))

    @app.exception_handler(Exception)
    async def internal_error(_request, err: Exception):  # a bug: this request fails, the server goes on
        return _error(500, f"internal error: {type(err).__name__}: {err}")

    @app.get("/health", response_model=Health, summary="Liveness and queue state (no token needed).")
    async def health():
        return {"status": "ok", "waiting": batcher.waiting, "in_flight": gate.count, **batcher.stats.as_dict()}

    @app.get("/info", dependencies=guarded, responses={401: ERRORS[401]}, summary="The served model and its decode.")
    async def info():
        return engine.info()

    @app.get("/metrics", dependencies=guarded, responses={401: ERRORS[401]}, response_class=Response,
             summary="Prometheus metrics (text format).")
    async def prometheus():
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.post("/plan", dependencies=guarded, response_model=PlanResponse, responses=ERRORS, openapi_extra=PLAN_BODY,
              summary="Plan 8 waypoints for one camera frame (one image per camera the model takes).")
    async def plan(request: Request):
        if not gate.try_enter():
            return _error(503, f"overloaded: {gate.cap} plan requests in flight; retry after {RETRY_AFTER_S} s",
                          {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"})  # shed the connection too
        t0 = time.perf_counter()
        try:
            return await _plan(request, t0)
        except BadRequest as err:
            return _error(err.status, err.reason, {"Connection": "close"} if err.status in (408, 413) else None)
        except ClientDisconnect:  # nobody to answer
            metrics.abandoned.inc()
            return Response(status_code=499)
        finally:
            gate.leave()

    async def _plan(request: Request, t0: float):
        body = await read_body(request, limits)
        try:  # off the event loop: /health and other connections keep being answered while a PNG decodes
            item = await asyncio.to_thread(parse_request, request.headers.get("content-type", ""), body,
                                           dict(request.query_params), engine.image_size,
                                           getattr(engine, "n_images", 1))
        except BadRequest:
            raise
        except Exception as err:  # noqa: BLE001 - whatever a parser raises on a malformed body is the body's fault
            raise BadRequest(400, f"malformed request ({type(err).__name__}: {err})") from None
        del body
        job = batcher.submit(item)
        planned = asyncio.wrap_future(job)
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            await asyncio.wait([planned, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not planned.done():  # the client left first
            # Cancel the batcher's own future here and now: cancelling only the asyncio wrapper reaches it a loop turn
            # later, by when the batcher may have started it. False: its batch is decoding already.
            never_decoded = job.cancel()
            planned.cancel()
            if never_decoded:
                raise ClientDisconnect()
            return Response(status_code=499)  # nobody to answer
        try:
            result, timing = planned.result()
        except Exception as err:  # noqa: BLE001 - the model failed on this request (alone: see DynamicBatcher)
            return _error(500, f"model failed on this request: {type(err).__name__}: {err}")
        total = time.perf_counter() - t0
        metrics.latency.observe(total)
        metrics.queue_s.observe(timing.queue_s)
        forwards, tokens = int(result.forwards), int(result.new_tokens)
        return plan_response(result, {
            "queue_ms": 1e3 * timing.queue_s, "decode_ms": 1e3 * timing.decode_s, "total_ms": 1e3 * total,
            "batch_size": timing.batch_size, "forwards": forwards, "new_tokens": tokens,
            "tpf": tokens / forwards if forwards else None})

    return app

