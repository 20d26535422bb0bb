"""The HTTP face of the planner server (FastAPI): `POST /plan`, `GET /health`, `GET /info`.

Requests are parsed and checked here (`eval.wire.parse_request`; a bad one is a 4xx with a one-line reason and
never reaches the model), queued on the `DynamicBatcher` and answered when their batch is decoded. A model failure
is a 500 for the requests it failed on only; any other unexpected error is a 500 for that request, and the server
keeps serving. Every error body is {"error": one line}.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from wamdiff.errors import one_line
from wamdiff.eval.wire import MAX_BODY_BYTES, BadRequest, parse_request, plan_response
from wamdiff.serve.batcher import BatchingConfig, DynamicBatcher


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": one_line(message)[:500]}, status_code=status)


def create_app(engine, batching: BatchingConfig | None = None, *, batcher: DynamicBatcher | None = None):
    """The FastAPI app serving `engine` (a `PlannerEngine`, or anything with `plan`, `info` and `image_size`)."""
    batcher = batcher or DynamicBatcher(engine.plan, batching or BatchingConfig(), start=False)

    @asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        yield
        await asyncio.to_thread(batcher.stop)

    app = FastAPI(title="wamdiff planner server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.batcher, app.state.engine = batcher, engine

    @app.exception_handler(HTTPException)
    async def http_error(_request, err: HTTPException):
        return _error(err.status_code, str(err.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request, err: RequestValidationError):
        return _error(422, str(err))

    @app.exception_handler(Exception)
    async def internal_error(_request, err: Exception):  # a bug: this request fails, the server goes on
        return _error(500, f"internal error: {type(err).__name__}: {err}")

    @app.get("/health")
    async def health():
        return {"status": "ok", "waiting": batcher.waiting, **batcher.stats.as_dict()}

    @app.get("/info")
    async def info():
        return engine.info()

    @app.post("/plan")
    async def plan(request: Request):
        t0 = time.perf_counter()
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _error(413, f"body of {declared} bytes exceeds {MAX_BODY_BYTES}")
        body = await request.body()
        try:
            item = parse_request(request.headers.get("content-type", ""), body, dict(request.query_params), engine.image_size)
        except BadRequest as err:
            return _error(err.status, err.reason)
        try:
            result, timing = await asyncio.wrap_future(batcher.submit(item))
        except Exception as err:  # noqa: BLE001 - the model failed on this request (alone: see DynamicBatcher)
            return _error(500, f"model failed on this request: {type(err).__name__}: {err}")
        forwards, tokens = int(result.forwards), int(result.new_tokens)
        return plan_response(result, {
            "queue_ms": 1e3 * timing.queue_s, "decode_ms": 1e3 * timing.decode_s,
            "total_ms": 1e3 * (time.perf_counter() - t0), "batch_size": timing.batch_size, "forwards": forwards,
            "new_tokens": tokens, "tpf": tokens / forwards if forwards else None})

    return app


@contextmanager
def running_server(app, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 60.0):
    """Serve `app` from a background thread for the block; yields its base URL (port 0: a free port)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="wamdiff-server", daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not server.started:
        if not thread.is_alive() or time.monotonic() - t0 > start_timeout:
            server.should_exit = True
            raise RuntimeError(f"the planner server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(30)
