"""`wamdiff serve-bench`: a bounded load test of the planner server on loopback.

Per checkpoint (diffusion in block mode, optionally AR): in-process decoding of the same scenes one by one (the
reference latency and the sequential one-client rate), then a server in a child process on 127.0.0.1 and, for each
client count, that many concurrent clients each sending its next request when the last one is answered, until
`requests` were sent or `seconds` passed (stops by itself). Reports p50 / p99 latency (client side), plans/s, the
mean batch the server formed, queue and decode time, and blocks per answer (if every answer takes the same number of
blocks, no sample could leave its batch early: continuous batching at block boundaries cannot gain there).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wamdiff.errors import UserError
from wamdiff.jsonfile import write_json

START_TIMEOUT_S = 300.0  # a server must answer /health within this (loading + warm-up on a loaded machine)
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BenchSettings:
    clients: list
    requests: int = 64
    seconds: float = 60.0
    max_batch: int = 32
    max_wait_ms: float = 5.0
    threads: int = 1
    fmt: str | None = None  # None: each checkpoint's recorded answer format


def _stats(latencies_s: list[float]) -> dict:
    if not latencies_s:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None}
    ms = 1e3 * np.asarray(latencies_s)
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean())}


def in_process(checkpoint: Path, mode: str, scenes: list, settings: BenchSettings) -> dict:
    """The same scenes planned one by one in this process (no server): latency and sequential plans/s."""
    import torch

    from wamdiff.eval.planners import make_planner

    torch.set_num_threads(settings.threads)
    planner = make_planner(f"model:{checkpoint},mode={mode}{f',fmt={settings.fmt}' if settings.fmt else ''},batch=1")
    planner.prepare()
    planner.plan(scenes[:1])  # warm-up, as the server does at start
    lat, t_start = [], time.perf_counter()
    for i in range(settings.requests):
        if time.perf_counter() - t_start >= settings.seconds:
            break
        t0 = time.perf_counter()
        planner.plan([scenes[i % len(scenes)]])
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t_start
    return {"n": len(lat), "plans_per_s": len(lat) / wall, **_stats(lat)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(checkpoint: Path, mode: str, settings: BenchSettings, log: Path):
    """`wamdiff serve` in a child process on 127.0.0.1; yields its URL once /health answers; stopped afterwards."""
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "wamdiff.cli", "serve", "--checkpoint", str(checkpoint), "--mode", mode,
           "--host", "127.0.0.1", "--port", str(port), "--max-batch", str(settings.max_batch),
           "--max-wait-ms", str(settings.max_wait_ms), "--threads", str(settings.threads),
           "--max-in-flight", str(max(settings.clients)),  # every client of the largest level is served, none refused
           *(["--fmt", settings.fmt] if settings.fmt else [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "OMP_NUM_THREADS": str(settings.threads)})
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.monotonic()
            while True:
                if proc.poll() is not None:
                    raise UserError(f"the server for {checkpoint} exited with code {proc.returncode}: "
                                    f"{' '.join(log.read_text().split()[-40:])}")
                try:
                    if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() - t0 > START_TIMEOUT_S:
                    raise UserError(f"the server for {checkpoint} did not answer /health within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


async def _load(url: str, bodies: list[bytes], clients: int, settings: BenchSettings) -> dict:
    import httpx

    sent, records = 0, []
    deadline = time.perf_counter() + settings.seconds
    headers = {"content-type": "application/json"}

    async def client(k: int, http) -> None:
        nonlocal sent
        i = k
        while sent < settings.requests and time.perf_counter() < deadline:
            sent += 1
            t0 = time.perf_counter()
            reply = await http.post("/plan", content=bodies[i % len(bodies)], headers=headers)
            lat = time.perf_counter() - t0
            body = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
            records.append((lat, reply.status_code, body.get("ok"), body.get("timing") or {}))
            i += clients

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(client(k, http) for k in range(clients))),
                               settings.seconds + REQUEST_TIMEOUT_S)
        wall = time.perf_counter() - t0
    ok = [r for r in records if r[1] == 200]
    timing = [r[3] for r in ok]

    def mean(key):
        vals = [t[key] for t in timing if t.get(key) is not None]
        return float(np.mean(vals)) if vals else None

    return {"clients": clients, "n": len(records), "http_errors": len(records) - len(ok),
            "failed_plans": sum(not r[2] for r in ok), "plans_per_s": len(ok) / wall if wall > 0 else None,
            **_stats([r[0] for r in ok]), "mean_batch": mean("batch_size"), "mean_queue_ms": mean("queue_ms"),
            "mean_decode_ms": mean("decode_ms"), "mean_server_ms": mean("total_ms"), "tpf": mean("tpf"),
            "new_tokens": sorted({int(t.get("new_tokens", 0)) for t in timing}), "wall_s": wall}


def run_serve_bench(targets: list[tuple[str, Path, str]], data: Path, out: Path, settings: BenchSettings) -> dict:
    import httpx

    from wamdiff.eval.data import load_scenes
    from wamdiff.eval.wire import scene_request

    scenes, _ = load_scenes(data, limit=max(8, min(64, settings.requests)))
    if not scenes:
        raise UserError(f"--data {data}: no scenes found; make some with `wamdiff data generate --split test`")
    bodies = [json.dumps(scene_request(s)).encode() for s in scenes]
    report = {"settings": asdict(settings), "scenes": len(scenes), "data": str(data), "targets": {},
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}}
    for label, checkpoint, mode in targets:
        entry = {"checkpoint": str(checkpoint), "mode": mode, "in_process": in_process(checkpoint, mode, scenes, settings)}
        with server_process(checkpoint, mode, settings, out / f"server_{label}.log") as url:
            entry["info"] = httpx.get(f"{url}/info", timeout=10).json()
            entry["levels"] = {str(c): asyncio.run(_load(url, bodies, c, settings)) for c in settings.clients}
        block = entry["info"].get("block_size")
        tokens = sorted({t for lv in entry["levels"].values() for t in lv["new_tokens"]})
        entry["blocks_per_answer"] = sorted({-(-t // block) for t in tokens}) if block and tokens else None
        report["targets"][label] = entry
    report["headline"] = _headline(report)
    write_json(out / "serve_bench.json", report)
    (out / "serve_bench.md").write_text(markdown(report))
    return report


def _headline(report: dict) -> dict:
    out = {}
    for label, e in report["targets"].items():
        lv, ip = e["levels"], e["in_process"]
        one, eight = lv.get("1"), lv.get("8")
        if one and eight and one["plans_per_s"] and eight["plans_per_s"]:
            out[f"{label}: plans/s at 8 clients / 1 client"] = eight["plans_per_s"] / one["plans_per_s"]
        if one and one["p99_ms"] and ip["p99_ms"]:
            out[f"{label}: p99 at 1 client / in-process p99"] = one["p99_ms"] / ip["p99_ms"]
            out[f"{label}: p50 at 1 client / in-process p50"] = one["p50_ms"] / ip["p50_ms"]
    return out


def _fmt(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def markdown(report: dict) -> str:
    lines = ["# wamdiff serve-bench (loopback)", "",
             f"{report['scenes']} scenes from {report['data']}; settings {report['settings']}; machine {report['machine']}.", "",
             "| planner | clients | requests | p50 ms | p99 ms | plans/s | mean batch | queue ms | decode ms | TPF |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, e in report["targets"].items():
        ip = e["in_process"]
        lines.append(f"| {label} in-process | 1 (no server) | {ip['n']} | {_fmt(ip['p50_ms'])} | {_fmt(ip['p99_ms'])} | "
                     f"{_fmt(ip['plans_per_s'], 2)} | 1 | - | - | - |")
        for c, lv in e["levels"].items():
            lines.append(f"| {label} server | {c} | {lv['n']} | {_fmt(lv['p50_ms'])} | {_fmt(lv['p99_ms'])} | "
                         f"{_fmt(lv['plans_per_s'], 2)} | {_fmt(lv['mean_batch'], 2)} | {_fmt(lv['mean_queue_ms'])} | "
                         f"{_fmt(lv['mean_decode_ms'])} | {_fmt(lv['tpf'], 2)} |")
    lines += ["", *[f"- {k}: {v:.2f}" for k, v in report["headline"].items()]]
    for label, e in report["targets"].items():
        if e.get("blocks_per_answer"):
            lines.append(f"- {label}: blocks per answer {e['blocks_per_answer']} (one value: no sample of a batch "
                         "finishes in an earlier block than the others)")
        errors = sum(lv["http_errors"] for lv in e["levels"].values())
        lines.append(f"- {label}: {errors} HTTP errors, {sum(lv['failed_plans'] for lv in e['levels'].values())} failed plans")
    return "\n".join(lines) + "\n"


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(markdown(report)))
