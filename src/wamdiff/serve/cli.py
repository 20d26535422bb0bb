"""`wamdiff serve` (a planner server) and `wamdiff serve-bench` (its loopback load test). Heavy imports stay in
the command bodies, so `wamdiff --help` does not load FastAPI or torch."""

from __future__ import annotations

from pathlib import Path

import typer

from wamdiff.cli_choices import AnswerFormat, DecodeMode, Dtype
from wamdiff.names import DEFAULT_MAX_STEPS, DEFAULT_THRESHOLD
from wamdiff.errors import UserError

app = typer.Typer(add_completion=False)


@app.command()
def serve(
    checkpoint: Path = typer.Option(..., help="Model directory (a wamdiff checkpoint)."),
    mode: DecodeMode = typer.Option(None, help="Decoding mode (default: block for a diffusion checkpoint, else ar)."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    fmt: AnswerFormat = typer.Option(None, "--format", "--fmt", help="Answer format (default: the one the checkpoint "
                                                                     "recorded)."),
    block_size: int = typer.Option(None, "--block-size", "--block", min=1, help="Block size B (default: the checkpoint's "
                                   "recorded decode, else the block size it was trained at)."),
    threshold: float = typer.Option(None, help="Unmasking threshold tau (default: the checkpoint's recorded decode, e.g. "
                                    f"0.5 for the shipped students, else {DEFAULT_THRESHOLD})."),
    max_steps: int = typer.Option(None, "--max-steps", "--steps", min=1, help="Denoising steps cap per block (default: "
                                  f"the checkpoint's recorded decode, else {DEFAULT_MAX_STEPS})."),
    dtype: Dtype = typer.Option(None, help="Weight dtype (default: as saved)."),
    max_batch: int = typer.Option(8, min=1, help="Requests decoded together."),
    max_wait_ms: float = typer.Option(5.0, min=0.0, help="How long a request waits for others to join its batch."),
    threads: int = typer.Option(None, min=1, help="torch threads (default: torch's)."),
    max_in_flight: int = typer.Option(32, min=1, help="Plan requests handled at once; more are answered 503 (retry)."),
    read_timeout: float = typer.Option(10.0, min=0.001, max=3600, help="Seconds a request's headers, then its body, "
                                                                        "may take to arrive (else 408)."),
    keep_alive: float = typer.Option(5.0, min=1, max=3600, help="Seconds an idle connection is kept open."),
    token: str = typer.Option(None, envvar="WAMDIFF_SERVE_TOKEN", help="Bearer token the requests must carry "
                              "(required beyond loopback: generated and printed when not given)."),
) -> None:
    """Serve a checkpoint: POST /plan (camera PNG + command + ego velocity / acceleration -> 8 waypoints), GET /health,
    GET /info, GET /metrics (Prometheus), docs at /docs. Concurrent requests are batched."""
    import uvicorn

    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.serve.app import create_app
    from wamdiff.serve.batcher import BatchingConfig
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings
    from wamdiff.serve.guards import ServerLimits, is_loopback, new_token
    from wamdiff.serve.server import bind, bound_port, server_config

    generated = token is None and not is_loopback(host)
    try:
        limits = ServerLimits(read_timeout_s=read_timeout, keep_alive_s=keep_alive, max_in_flight=max_in_flight,
                              token=new_token() if generated else token)
    except ValueError as err:
        raise UserError(str(err)) from None
    try:  # before the model loads: a port in use is found at once
        sock = bind(host, port)
    except OSError as err:
        raise UserError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err})") from None
    batching = BatchingConfig(max_batch, max_wait_ms)
    try:
        # the flags are the top layer of the decode settings, over the checkpoint's recorded decode (`resolve_decode`)
        flags = {"mode": mode, "block_size": block_size, "threshold": threshold, "max_steps": max_steps, "dtype": dtype}
        spec = PlannerSpec.model(checkpoint, {"fmt": fmt, "batch": max_batch}, flags, text=f"model:{checkpoint}")
        engine = PlannerEngine(ServeSettings(spec, max_wait_ms, threads))
    except ValueError as err:
        sock.close()
        raise UserError(str(err)) from None
    info = engine.info()
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"wamdiff serve: {checkpoint} ({info['mode']}, B={info['block_size']}, tau={info['threshold']}, "
               f"{info['dtype']}, max batch {max_batch}, wait {max_wait_ms:g} ms, at most {max_in_flight} in flight)", err=True)
    if generated:
        typer.echo(f"wamdiff serve: listening beyond loopback; requests need 'Authorization: Bearer {limits.token}' "
                   "(or pass --token / set WAMDIFF_SERVE_TOKEN)", err=True)
    typer.echo(f"wamdiff serve: listening on http://{shown}:{bound_port(sock)} (docs at /docs)", err=True)
    uvicorn.Server(server_config(create_app(engine, batching, limits=limits), host, bound_port(sock), limits)).run(
        sockets=[sock])


@app.command("serve-bench")
def serve_bench(
    checkpoint: Path = typer.Option(..., help="Diffusion checkpoint (served in block mode)."),
    ar_checkpoint: Path = typer.Option(None, help="AR checkpoint (served in ar mode) for the AR-vs-diffusion rows."),
    data: Path = typer.Option(..., help="Scene directory (e.g. from `wamdiff data generate --split test`)."),
    out: Path = typer.Option(Path("runs/serve-bench"), help="Results folder (JSON + Markdown)."),
    clients: str = typer.Option("1,8,32", help="Concurrent client counts."),
    requests: int = typer.Option(64, min=1, help="At most this many requests per client count."),
    seconds: float = typer.Option(60.0, min=1.0, help="At most this long per client count."),
    max_batch: int = typer.Option(32, min=1, help="Server --max-batch."),
    max_wait_ms: float = typer.Option(5.0, min=0.0, help="Server --max-wait-ms."),
    threads: int = typer.Option(1, min=1, help="torch threads of the server (and of the in-process reference)."),
    fmt: AnswerFormat = typer.Option(None, "--format", "--fmt", help="Answer format of the checkpoints (default: the one "
                                                                     "each recorded)."),
) -> None:
    """Loopback load test: a server per checkpoint on 127.0.0.1, 1 / 8 / 32 concurrent clients (bounded in requests
    and time), p50 / p99 latency and plans/s, against in-process decoding of the same scenes."""
    from wamdiff.outdir import claim_for_command
    from wamdiff.serve.bench import BenchSettings, print_report, run_serve_bench

    try:
        levels = sorted({int(c) for c in clients.split(",") if c.strip()})
    except ValueError:
        raise UserError(f"--clients {clients!r}: expected comma-separated integers, e.g. 1,8,32") from None
    if not levels or levels[0] < 1:
        raise UserError(f"--clients {clients!r}: every count must be at least 1")
    targets = [("diffusion", checkpoint, "block")] + ([("AR", ar_checkpoint, "ar")] if ar_checkpoint else [])
    claim_for_command(out)
    settings = BenchSettings(levels, requests, seconds, max_batch, max_wait_ms, threads, fmt)
    print_report(run_serve_bench(targets, data, out, settings))
