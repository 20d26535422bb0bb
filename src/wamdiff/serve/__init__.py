"""The planner server: `wamdiff serve --checkpoint DIR` (FastAPI + uvicorn) with dynamic batching, and its
loopback load test `wamdiff serve-bench`.

- `batcher.py`: `DynamicBatcher` (requests from many connections decoded together, up to a size / wait bound;
  a failing batch is retried request by request so a model failure is that request's alone).
- `planner_engine.py`: `PlannerEngine` (a checkpoint behind `eval.planners.ModelPlanner`, warmed up; `/info`).
- `app.py`: `create_app` (POST /plan, GET /health, GET /info, GET /metrics, /docs), `running_server` (a server in a
  thread).
- `guards.py`: the limits (body, read / keep-alive timeouts, in-flight cap, bearer token); `schemas.py`: the pydantic
  bodies (OpenAPI); `metrics.py`: Prometheus; `server.py`: the uvicorn side (socket, header deadline).
- `bench.py`: the bounded load test (p50 / p99 latency, plans/s at 1, 8, 32 clients; AR vs diffusion).
- `cli.py`: the two commands. The wire format is `eval.wire` (the `http://` planner shares it).
"""
