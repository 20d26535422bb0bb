"""The planner server: the wire format (`eval.wire`), dynamic batching, bad requests (4xx, one line, the server lives
on), model failures (5xx for that request only), and plans through HTTP equal to the in-process planner's, in
open and closed loop."""

from __future__ import annotations

import base64
import io
import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_reliability_errors import assert_user_error, cli

from wamdiff.driving.prompts import scene_prompt
from wamdiff.eval.planners import Plan
from wamdiff.eval.synthetic import straight_road_scene
from wamdiff.eval.wire import MAX_BODY_BYTES, BadRequest, encode_png, parse_request, scene_request
from wamdiff.serve.app import create_app, running_server
from wamdiff.serve.batcher import BatchingConfig, DynamicBatcher

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
JSON = "application/json"


def _scene(i: int = 0, size: int = 8):
    s = straight_road_scene(speed=7.0 + 1.37 * i, scene_id=f"s{i}")
    s.ego_history = s.ego_history.copy()
    s.ego_history[-1, 4:7] = (0.123 * i, -0.456, 0.789 * i)
    rng = np.random.default_rng(i)
    s.image = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    return s


def _body(**override) -> bytes:
    req = scene_request(_scene())
    req.update(override)
    return json.dumps({k: v for k, v in req.items() if v is not None}).encode()


# -- wire format --------------------------------------------------------------------------------------------------
def test_a_request_carries_exactly_what_the_prompt_and_the_image_encoder_read():
    scene = _scene(3)
    got = parse_request(JSON, json.dumps(scene_request(scene)).encode(), {}, 8)
    assert np.array_equal(got.image, scene.image) and got.image.dtype == np.uint8
    assert scene_prompt(got) == scene_prompt(scene) and got.command == scene.command
    # the same request as a PNG body with query parameters
    vx, vy, ax, ay = (float(v) for v in scene.ego_history[-1, 3:7])
    raw = parse_request("image/png", encode_png(scene.image), {"command": scene.command, "vx": str(vx), "vy": str(vy),
                                                               "ax": str(ax), "ay": str(ay)}, 8)
    assert np.array_equal(raw.image, scene.image) and scene_prompt(raw) == scene_prompt(scene)


def _rgba_png() -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGBA", (8, 8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("content_type, body, status, words", [
    (JSON, b"{not json", 400, "not valid JSON"),
    (JSON, b"[1, 2]", 400, "JSON object"),
    (JSON, _body(command=None), 422, "missing field(s) command"),
    (JSON, _body(speed=3), 422, "unknown field(s) speed"),
    (JSON, _body(image="@@@"), 400, "not valid base64"),
    (JSON, _body(image=base64.b64encode(b"GIF89a....").decode()), 400, "not a PNG"),
    (JSON, _body(image=base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 20).decode()), 400, "undecodable PNG"),
    (JSON, _body(image=_rgba_png()), 422, "mode RGBA"),
    (JSON, _body(image=base64.b64encode(encode_png(np.zeros((16, 16, 3), np.uint8))).decode()), 422, "16x16 pixels"),
    (JSON, _body(command="north"), 422, "command: 'north'"),
    (JSON, _body(velocity=[1.0]), 422, "field velocity: expected [x, y]"),
    (JSON, _body(velocity=[100.0, 0.0]), 422, "velocity[0]: 100 is out of range"),
    (JSON, _body(acceleration=[0.0, "nan"]), 422, "acceleration[1]: 'nan' is not finite"),
    (JSON, _body(acceleration=[True, 0.0]), 422, "expected a number, got bool"),
    ("text/plain", b"hi", 415, "Content-Type 'text/plain'"),
    ("image/png", encode_png(np.zeros((8, 8, 3), np.uint8)), 422, "missing query parameter(s) command, vx"),
    (JSON, b" " * (MAX_BODY_BYTES + 1), 413, "exceeds"),
])
def test_bad_requests_get_a_4xx_with_a_one_line_reason(content_type, body, status, words):
    with pytest.raises(BadRequest) as err:
        parse_request(content_type, body, {}, 8)
    assert err.value.status == status and words in err.value.reason and "\n" not in err.value.reason


# -- dynamic batching ---------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self, bad=()):
        self.batches, self.bad = [], set(bad)

    def __call__(self, values):
        self.batches.append(list(values))
        if self.bad & set(values):
            raise RuntimeError(f"model exploded on {sorted(self.bad & set(values))}")
        return [v * 10 for v in values]


def test_waiting_requests_are_batched_in_arrival_order_up_to_the_size_bound():
    rec = Recorder()
    batcher = DynamicBatcher(rec, BatchingConfig(max_batch=4, max_wait_ms=0), start=False)
    futures = [batcher.submit(i) for i in range(10)]  # all waiting before the decoder starts
    batcher.start()
    results = [f.result(timeout=10) for f in futures]
    batcher.stop()
    assert rec.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [r for r, _ in results] == [10 * i for i in range(10)]
    assert [t.batch_size for _, t in results] == [4] * 8 + [2] * 2
    assert batcher.stats.as_dict()["batch_sizes"] == {"2": 1, "4": 2}


class FakeClock:
    """Seconds that move only when the test moves them; counts the reads of other threads (the batcher's), each
    counted once its value is fixed, so the test moving the clock cannot change a read it has seen."""

    def __init__(self, t: float = 0.0):
        self.t, self.batcher_reads, self.test_thread, self._cv = t, 0, threading.get_ident(), threading.Condition()

    def __call__(self) -> float:
        t = self.t
        if threading.get_ident() != self.test_thread:
            with self._cv:
                self.batcher_reads += 1
                self._cv.notify_all()
        return t

    def wait_for_batcher_reads(self, n: int, timeout: float = 10.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self.batcher_reads >= n, timeout)


def test_a_lone_request_waits_for_company_only_after_a_shared_batch():
    """On a fake clock, so the queue times are exact on any machine: the bound (50 ms) is only ever waited in real
    time while the test has not yet moved the clock past it."""
    rec, clock = Recorder(), FakeClock()
    batcher = DynamicBatcher(rec, BatchingConfig(max_batch=8, max_wait_ms=50), start=False, clock=clock)
    pair = [batcher.submit(1), batcher.submit(2)]  # at t = 0
    clock.t = 0.05  # the pair's bound has passed by the time the batcher looks: it goes as it is
    batcher.start()
    assert [(f.result(timeout=10)[1].batch_size, f.result()[1].queue_s) for f in pair] == [(2, 0.05), (2, 0.05)]

    reads, clock.t = clock.batcher_reads, 1.0
    waited = batcher.submit(3)  # after a batch of two: it waits the bound for others, then goes alone
    # two looks at the clock standing at 1.0: the batcher waited for company and still waits (one that did not
    # wait has read 1.0 as its batch's start by now)
    assert clock.wait_for_batcher_reads(reads + 2)
    clock.t = 1.05
    _, waited = waited.result(timeout=10)

    clock.t = 2.0  # and stays: a batcher that waited for company now would wait for ever
    _, at_once = batcher.submit(4).result(timeout=10)  # after a lone batch: no one to wait for
    batcher.stop()
    assert rec.batches == [[1, 2], [3], [4]]
    assert waited.batch_size == at_once.batch_size == 1
    assert waited.queue_s == pytest.approx(0.05) and at_once.queue_s == 0.0  # the bound against none


def test_a_request_sent_on_a_reply_is_not_company():
    """A client that sends its next request as soon as its lone reply comes did not arrive while that batch ran:
    the request goes at once (the clock never moves here, so a wait would never end)."""
    rec = Recorder()
    batcher = DynamicBatcher(rec, BatchingConfig(max_batch=8, max_wait_ms=50), clock=FakeClock())
    for i in range(20):
        assert batcher.submit(i).result(timeout=10)[1].queue_s == 0.0
    batcher.stop()
    assert rec.batches == [[i] for i in range(20)]


def test_a_model_failure_is_the_failing_requests_own():
    rec = Recorder(bad={3})
    batcher = DynamicBatcher(rec, BatchingConfig(max_batch=8, max_wait_ms=0), start=False)
    futures = [batcher.submit(i) for i in range(5)]
    batcher.start()
    with pytest.raises(RuntimeError, match=r"exploded on \[3\]"):
        futures[3].result(timeout=10)
    assert [futures[i].result(timeout=10)[0] for i in (0, 1, 2, 4)] == [0, 10, 20, 40]
    batcher.stop()
    assert rec.batches[0] == [0, 1, 2, 3, 4] and [b for b in rec.batches[1:]] == [[0], [1], [2], [3], [4]]
    assert batcher.stats.failed == 1 and batcher.stats.isolated == 1


# -- the HTTP server with a stand-in engine -------------------------------------------------------------------------
class FakeEngine:
    """Plans straight ahead at the requested speed; fails (raises) on "left" and returns an unusable plan on "right"."""

    image_size = 8

    def plan(self, inputs):
        if any(i.command == "left" for i in inputs):
            raise RuntimeError("decoder exploded")
        return [Plan(np.stack([np.arange(1, 9) * 0.5 * i.velocity[0], np.zeros(8)], 1), text="fake", forwards=4, new_tokens=8)
                if i.command != "right" else Plan(None, text="garbage", ok=False, reason="parse failed", forwards=2, new_tokens=3)
                for i in inputs]

    def info(self):
        return {"mode": "fake", "camera": {"size": 8}}


@pytest.fixture(scope="module")
def fake_server():
    pytest.importorskip("fastapi")
    app = create_app(FakeEngine(), BatchingConfig(max_batch=4, max_wait_ms=20))
    with running_server(app) as url:
        yield url


def test_server_answers_plans_health_and_info(fake_server):
    import httpx

    reply = httpx.post(f"{fake_server}/plan", content=_body(velocity=[2.0, 0.0]), headers={"content-type": JSON})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["ok"] and np.allclose(body["waypoints"], np.stack([np.arange(1, 9) * 1.0, np.zeros(8)], 1))
    assert body["text"] == "fake" and body["timing"]["forwards"] == 4 and body["timing"]["tpf"] == 2.0
    assert {"queue_ms", "decode_ms", "total_ms", "batch_size"} <= set(body["timing"])
    unusable = httpx.post(f"{fake_server}/plan", content=_body(command="right"), headers={"content-type": JSON}).json()
    assert unusable["ok"] is False and unusable["waypoints"] is None and unusable["reason"] == "parse failed"
    assert httpx.get(f"{fake_server}/info").json()["mode"] == "fake"
    assert httpx.get(f"{fake_server}/health").json()["status"] == "ok"


def test_bad_input_never_kills_the_server_and_a_model_failure_is_one_5xx(fake_server):
    import httpx

    for content, ctype, status in [(b"{", JSON, 400), (_body(command=None), JSON, 422), (b"x", "text/plain", 415)]:
        reply = httpx.post(f"{fake_server}/plan", content=content, headers={"content-type": ctype})
        assert reply.status_code == status and list(reply.json()) == ["error"] and "\n" not in reply.json()["error"]
    missing = httpx.get(f"{fake_server}/nowhere")
    assert missing.status_code == 404 and list(missing.json()) == ["error"]
    # a failing request and good ones sent together (one batch): only the failing one gets the 500
    replies = [None] * 3

    def send(i, command):
        replies[i] = httpx.post(f"{fake_server}/plan", content=_body(command=command), headers={"content-type": JSON})

    threads = [threading.Thread(target=send, args=(i, c)) for i, c in enumerate(["straight", "left", "straight"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in replies] == [200, 500, 200]
    assert "model failed on this request" in replies[1].json()["error"] and "decoder exploded" in replies[1].json()["error"]
    assert httpx.get(f"{fake_server}/health").json()["status"] == "ok"


# -- the real model: same plans as in process -------------------------------------------------------------------------
SERVED = CHECKPOINTS / "distill_block"
IN_PROCESS = f"model:{SERVED},mode=block"  # its answer format (delta) is recorded in the checkpoint


def _engine(max_batch: int):
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings

    spec = PlannerSpec.model(SERVED, {"mode": "block", "fmt": "delta", "batch": max_batch})
    return PlannerEngine(ServeSettings(spec, max_wait_ms=0))


@pytest.fixture(scope="module")
def model_server():
    """The diffusion checkpoint served one request per batch (so each plan is decoded alone, as batch=1 in process)."""
    pytest.importorskip("fastapi")
    engine = _engine(1)
    with running_server(create_app(engine, BatchingConfig(1, 0.0))) as url:
        yield url, engine


def _live_scenes(n: int):
    scenes = [_scene(i, size=64) for i in range(n)]
    return scenes


def test_served_plans_equal_in_process_plans(model_server):
    from wamdiff.eval.planners import make_planner, plan_scenes
    from wamdiff.decoding.config import resolve_decode
    from wamdiff.models.recorded import recorded_decode

    url, engine = model_server
    info = engine.info()
    recorded = recorded_decode(SERVED)  # the decode the pipeline evaluated the shipped student with
    assert info["mode"] == "block" and info["format"] == "delta"
    want = resolve_decode(recorded=recorded)
    assert (info["block_size"], info["threshold"], info["max_steps"]) == (want.block_size, want.threshold, want.max_steps)
    scenes = _live_scenes(3)
    served = plan_scenes(make_planner(url), scenes)
    local = plan_scenes(make_planner(f"{IN_PROCESS},batch=1"), scenes)
    assert [p.text for p in served] == [p.text for p in local] and all(p.text for p in served)
    assert [p.ok for p in served] == [p.ok for p in local]
    for a, b in zip(served, local):
        assert (a.xy is None and b.xy is None) or np.array_equal(a.xy, b.xy)
        assert a.forwards == b.forwards and a.new_tokens == b.new_tokens


def test_a_batch_of_requests_decodes_as_the_in_process_batch():
    from wamdiff.eval.planners import make_planner
    from wamdiff.eval.wire import parse_request as parse

    engine = _engine(3)
    scenes = _live_scenes(3)
    inputs = [parse(JSON, json.dumps(scene_request(s)).encode(), {}, 64) for s in scenes]
    batcher = DynamicBatcher(engine.plan, BatchingConfig(3, 0.0), start=False)
    futures = [batcher.submit(i) for i in inputs]
    batcher.start()
    results = [f.result(timeout=300) for f in futures]
    batcher.stop()
    assert [t.batch_size for _, t in results] == [3, 3, 3]
    local = make_planner(f"{IN_PROCESS},batch=3").plan(scenes)
    assert [p.text for p, _ in results] == [p.text for p in local]


def test_closed_loop_through_the_server_gives_the_in_process_rows(model_server):
    from wamdiff.eval.closedloop import planner_camera, route_set, run_routes
    from wamdiff.eval.planners import make_planner

    url, _ = model_server
    picks = {r.name: r for r in route_set("dev")}
    routes = [replace(picks["highway_000"], timeout_s=2.5), replace(picks["intersection_000"], timeout_s=2.0)]
    http, local = make_planner(url), make_planner(f"{IN_PROCESS},batch=1")
    assert planner_camera(http) == planner_camera(local)  # the server's /info camera, as the checkpoint records it

    def rows(planner):
        out = []
        for r in run_routes(planner, routes):
            row = r.row()
            row.pop("wall_s")
            out.append(row)
        return out

    served = rows(http)
    assert served == rows(local)
    assert all(r["n_plans"] >= 4 for r in served)


def test_an_unreachable_server_is_a_one_line_error_before_anything_runs(tmp_path):
    res = cli("eval", "closedloop", "--planner", "http://127.0.0.1:9", "--out", tmp_path / "cl")
    assert_user_error(res, "no planner server answers at http://127.0.0.1:9", "wamdiff serve")
    assert not (tmp_path / "cl").exists()  # refused before the output folder was claimed


@pytest.mark.parametrize("args, words", [
    (["--checkpoint", "/no/such/dir"], "not a model directory"),
    (["--checkpoint", str(CHECKPOINTS / "ar_vla"), "--mode", "block"], "has no diffusion settings"),
    (["--checkpoint", str(SERVED), "--max-batch", "0"], "--max-batch"),
])
def test_serve_refuses_bad_settings_in_one_line(args, words):
    assert_user_error(cli("serve", *args, "--port", "0"), words)


@pytest.mark.slow
def test_serve_bench_runs_bounded_on_loopback(tmp_path):
    """`wamdiff serve-bench` end to end with tiny bounds: a server process, 1 and 2 clients, a report."""
    from wamdiff.driving.dataset import generate_dataset
    from wamdiff.serve.bench import BenchSettings, run_serve_bench

    data = tmp_path / "data"
    generate_dataset(data, ["highway"], "test", n=2, workers=1, progress=False, camera={"look_ahead": 0.0, "route": False})
    report = run_serve_bench([("diffusion", SERVED, "block")], data, tmp_path / "out",
                             BenchSettings([1, 2], requests=3, seconds=30.0, max_batch=4))
    levels = report["targets"]["diffusion"]["levels"]
    assert [lv["n"] for lv in levels.values()] == [3, 3] and all(lv["http_errors"] == 0 for lv in levels.values())
    assert report["targets"]["diffusion"]["blocks_per_answer"] and (tmp_path / "out" / "serve_bench.md").exists()
