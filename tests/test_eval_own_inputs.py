"""A user's two-camera VLA evaluated and served on its own inputs: `wamdiff eval openloop --data samples.json` decodes
each sample's own prompt (two images, the model's Qwen chat template) and measures it against the sample's answer,
with the L2 that decoding the same prompts directly and computing the distances by hand gives; a JSON the evaluation
cannot use, or a planner that needs a simulator scene, is one line and exit 2; the planner server takes one image
per `<image>` of the checkpoint's prompt (`images`), and refuses a request with another count (422, one line)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch
from PIL import Image
from test_reliability_errors import assert_user_error, cli
from test_training_fixtures import one_thread

from wamdiff.driving.trajectory import format_trajectory, parse_trajectory
from wamdiff.models import build_model, build_tokenizer, save_model
from wamdiff.models.standin import QWEN_CHAT_TEMPLATE

HUMAN = ("Front camera: <image>\nRear camera: <image>\nThe navigation information is: {cmd}\n"
         "Predict 8 waypoints for the next 4 seconds.")
SERVED = ("Front camera: <image>\nRear camera: <image>\nThe navigation information is: {command}\n"
          "The current velocity is: ({vx:.2f},{vy:.2f}) and current accelerate is: ({ax:.2f},{ay:.2f})")
FMT = "bins"  # one token per number, every value in bounds: an untrained model's answer parses, so L2 exists
XY = [np.stack([np.arange(1, 9) * 2.0, np.zeros(8)], 1),  # the two samples' answers
      np.stack([np.arange(1, 9) * 3.0, np.linspace(0.0, 1.4, 8)], 1)]


def _user_vla(folder, prompt: str | None = None):
    tok = build_tokenizer()
    tok.chat_template = QWEN_CHAT_TEMPLATE  # the user's model: Qwen's template in its tokenizer
    model = build_model("tiny", tok, seed=0)
    model.config.wamdiff_answer_format = FMT
    if prompt is not None:
        model.config.wamdiff_prompt = prompt  # the served prompt: two cameras
    save_model(model, tok, folder)
    return folder


def _two_camera_json(folder, xys=XY):
    """samples.json in `folder`: one sample per answer in `xys` (ids s0, s1, ...), two random 64x64 PNG cameras
    each and the HUMAN prompt (its command cycling left, straight, right)."""
    rng = np.random.default_rng(0)
    samples = []
    for i, xy in enumerate(xys):
        names = [f"s{i}_front.png", f"s{i}_rear.png"]
        for name in names:
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / name)
        samples.append({"id": f"s{i}", "image": names, "conversations": [
            {"from": "human", "value": HUMAN.format(cmd=("left", "straight", "right")[i % 3])},
            {"from": "gpt", "value": format_trajectory(xy, FMT)}]})
    path = folder / "samples.json"
    path.write_text(json.dumps(samples))
    return path


def test_openloop_on_the_users_own_two_camera_json(tmp_path):
    ckpt, data = _user_vla(tmp_path / "user_vla"), _two_camera_json(tmp_path)
    spec_text = f"model:{ckpt},mode=ar,batch=1,max_new_tokens=24"
    with one_thread():
        res = cli("eval", "openloop", "--data", data, "--out", tmp_path / "ol", "-p", spec_text)
    assert res.exit_code == 0, (res.output, res.exception)
    files = sorted(p.name for p in (tmp_path / "ol").iterdir())  # the scene-based openloop's files
    assert {"openloop_summary.json", "open_summary.json", "plans.json"} <= set(files)
    assert any(f.startswith("openloop_") and f.endswith(".csv") for f in files)
    (agg_file,) = [f for f in files if f.startswith("openloop_model") and f.endswith(".json")]
    overall = json.loads((tmp_path / "ol" / agg_file).read_text())["overall"]

    # the same prompts decoded directly (the training path's encoding), the distances by hand
    from wamdiff.decoding import generate
    from wamdiff.eval.planners import ModelPlanner
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.models import image_processor_for, load_model
    from wamdiff.training.data import load_examples

    model, tok = load_model(ckpt)
    examples = load_examples(data, tok, vision=True, image_processor=image_processor_for(model))
    assert all(e.prompt.image_grid_thw.shape == (2, 3) for e in examples)  # both cameras of each sample
    planner = ModelPlanner(PlannerSpec.parse(spec_text))
    config = planner._decode_config(tok)  # the spec's decode (its grammar too)
    from wamdiff.eval.json_data import load_json_samples

    for sample, e in zip(load_json_samples(data, {spec_text: planner.spec}), examples):  # the planner's prompt = training's
        got = planner.encode(sample)
        assert torch.equal(got.input_ids, e.prompt.input_ids) and torch.equal(got.pixel_values, e.prompt.pixel_values)
    with one_thread():
        texts = [generate(model, tok, [e.prompt], config)[0].text for e in examples]
    preds = [parse_trajectory(t, FMT) for t in texts]
    assert all(p.ok for p in preds), texts
    truths = [parse_trajectory(format_trajectory(xy, FMT), FMT).xy for xy in XY]
    for xy, truth in zip(XY, truths):  # the bins' centres: within a bin of the answers written
        assert np.abs(truth - xy).max() < 1.0
    err = np.array([np.sqrt(((np.asarray(p.xy) - t) ** 2).sum(1)) for p, t in zip(preds, truths)])  # (2 samples, 8)
    assert overall["n"] == 2 and overall["n_failed"] == 0 and overall["failure_rate"] == 0.0
    for k, t in enumerate(("0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0")):
        assert overall[f"l2_{t}s"] == pytest.approx(err[:, k].mean(), rel=1e-9)
    for sec in (1, 2, 3, 4):
        assert overall[f"l2avg_{sec}s"] == pytest.approx(err[:, : 2 * sec].mean(), rel=1e-9)
    assert overall["ade"] == pytest.approx(err.mean(), rel=1e-9) and overall["fde"] == pytest.approx(err[:, -1].mean())
    assert overall["collision_rate"] is None  # a sample has no other agents
    assert "l2_1.0s" in res.stdout and "samples of" in res.stdout  # the table


def _fake_checkpoint(folder):
    """Enough of a vision checkpoint for the checks made before any model loads."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vision_config": {}, "wamdiff_answer_format": FMT}))
    return folder


def test_json_data_refuses_scene_planners_and_bad_files(tmp_path):
    data = _two_camera_json(tmp_path)
    ckpt = _fake_checkpoint(tmp_path / "ckpt")
    for planner in ("cv", "expert", "reference"):
        assert_user_error(cli("eval", "openloop", "--data", data, "-p", planner, "--out", tmp_path / "o"),
                          f"planner '{planner}'", "simulator scenes")
    assert_user_error(cli("eval", "pdms", "--data", data, "--out", tmp_path / "o"), str(data), "eval openloop")
    # a model whose recorded prompt takes two cameras cannot plan the simulator's one-camera scenes: refused up front
    two = tmp_path / "two_cam"
    two.mkdir()
    (two / "config.json").write_text(json.dumps({"vision_config": {}, "wamdiff_answer_format": FMT,
                                                  "wamdiff_prompt": "front <image> back <image> {command}"}))
    assert_user_error(cli("eval", "closedloop", "-p", f"model:{two}", "--routes", "dev", "--out", tmp_path / "o"),
                      "takes 2 camera images", "eval openloop")
    # a fallback plans from the scene, which a sample has not: refused, not silently unused
    assert_user_error(cli("eval", "openloop", "--data", data, "-p", f"model:{ckpt},fallback=cv", "--out", tmp_path / "o"),
                      "fallback=", "drop fallback=")

    samples = json.loads(data.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([samples[0], {**samples[1], "image": ["s1_front.png", "missing.png"]}]))
    assert_user_error(cli("eval", "openloop", "--data", bad, "-p", f"model:{ckpt}", "--out", tmp_path / "o"),
                      str(bad), "'s1'", "field 'image'", "missing.png")
    bad.write_text(json.dumps([{k: v for k, v in samples[0].items() if k != "conversations"}]))
    assert_user_error(cli("eval", "openloop", "--data", bad, "-p", f"model:{ckpt}", "--out", tmp_path / "o"),
                      str(bad), "'conversations'")
    bad.write_text(json.dumps([{**samples[0], "conversations": [samples[0]["conversations"][0],
                                                                {"from": "gpt", "value": "turn left"}]}]))
    assert_user_error(cli("eval", "openloop", "--data", bad, "-p", f"model:{ckpt}", "--out", tmp_path / "o"),
                      str(bad), "field conversations (gpt value)", FMT)
    bad.write_text(json.dumps([{**samples[0], "image": "s0_front.png"}]))  # two <image>, one image
    assert_user_error(cli("eval", "openloop", "--data", bad, "-p", f"model:{ckpt}", "--out", tmp_path / "o"),
                      str(bad), "2 <image> placeholder(s)", "1 image(s)")


def _b64(image) -> str:
    from wamdiff.eval.wire import encode_png

    return base64.b64encode(encode_png(image)).decode("ascii")


def test_server_takes_one_image_per_camera_of_the_checkpoints_prompt(tmp_path):
    from fastapi.testclient import TestClient

    from wamdiff.eval.planners import ModelPlanner
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.eval.wire import PlanInput
    from wamdiff.serve.app import create_app
    from wamdiff.serve.batcher import BatchingConfig
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings

    one = _user_vla(tmp_path / "one_camera")  # no recorded prompt: the world's one-camera prompt
    assert ModelPlanner(PlannerSpec.model(one)).n_images == 1
    ckpt = _user_vla(tmp_path / "two_cameras", SERVED)
    with one_thread():
        engine = PlannerEngine(ServeSettings(PlannerSpec.model(ckpt, {"mode": "ar", "batch": 1, "max_new_tokens": 24}),
                                             max_wait_ms=0))
        size = engine.image_size
        rng = np.random.default_rng(1)
        front, rear = (rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(2))
        request = {"command": "left", "velocity": [8.0, 0.0], "acceleration": [0.0, 0.0]}
        # the request's prompt: the recorded one, with both cameras
        encoded = engine.planner.encode(PlanInput(front, "left", (8.0, 0.0), (0.0, 0.0), more_images=(rear,)))
        assert encoded.image_grid_thw.shape == (2, 3)
        with TestClient(create_app(engine, BatchingConfig(1, 0.0))) as client:
            assert client.get("/info").json()["n_images"] == 2
            two = client.post("/plan", json={"images": [_b64(front), _b64(rear)], **request})
            single = client.post("/plan", json={"image": _b64(front), **request})
            three = client.post("/plan", json={"images": [_b64(front)] * 3, **request})
            small = client.post("/plan", json={"images": [_b64(front), _b64(rear[:8, :8])], **request})
            png = client.post("/plan", content=base64.b64decode(_b64(front)), headers={"content-type": "image/png"},
                              params={"command": "left", "vx": 8, "vy": 0, "ax": 0, "ay": 0})
    assert two.status_code == 200, two.text
    body = two.json()
    assert body["ok"] and len(body["waypoints"]) == 8 and body["timing"]["new_tokens"] > 0
    assert np.allclose(body["waypoints"], parse_trajectory(body["text"], FMT).xy)
    for reply, needle in ((single, "field image: 1 camera image(s), the model takes 2"),
                          (three, "field images: 3 camera image(s), the model takes 2"),
                          (small, f"field images[1]: 8x8 pixels, the model's camera takes {size}x{size}"),
                          (png, "image/png carries one camera image, the model takes 2")):
        assert reply.status_code == 422, reply.text
        assert needle in reply.json()["error"] and "\n" not in reply.json()["error"]


def test_wire_images_field_checks_each_image():
    from wamdiff.eval.wire import BadRequest, parse_request, scene_request

    size, img = 8, np.zeros((8, 8, 3), np.uint8)
    base = {"command": "straight", "velocity": [5.0, 0.0], "acceleration": [0.0, 0.0]}
    got = parse_request("application/json", json.dumps({"images": [_b64(img), _b64(img + 1)], **base}).encode(), {}, size, 2)
    assert len(got.images) == 2 and int(got.images[1][0, 0, 0]) == 1
    one = parse_request("application/json", json.dumps({"images": [_b64(img)], **base}).encode(), {}, size)  # one camera
    assert len(one.images) == 1
    assert set(scene_request(got)) == {"images", "command", "velocity", "acceleration"}
    assert set(scene_request(one)) == {"image", "command", "velocity", "acceleration"}  # one camera: as today
    grey = base64.b64encode(_png_grey(size)).decode()
    cases = [({"images": [_b64(img), grey]}, 422, "field images[1]: PNG mode L"),
             ({"images": [_b64(img), "not base64!"]}, 400, "field images[1]: not valid base64"),
             ({"images": [_b64(img), "aGVsbG8="]}, 400, "field images[1]: not a PNG"),
             ({"images": _b64(img)}, 422, "field images: expected a list"),
             ({"images": [_b64(img)] * 2, "image": _b64(img)}, 422, "both given")]
    for fields, status, needle in cases:
        with pytest.raises(BadRequest) as err:
            parse_request("application/json", json.dumps({**fields, **base}).encode(), {}, size, 2)
        assert err.value.status == status and needle in err.value.reason, err.value.reason


def _png_grey(size: int) -> bytes:
    import io

    buf = io.BytesIO()
    Image.fromarray(np.zeros((size, size), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_served_checkpoint_whose_recorded_prompt_does_not_format_is_one_line(tmp_path):
    from wamdiff.errors import UserError
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings

    ckpt = _user_vla(tmp_path / "bad_prompt", "<image> going {comand} at {vx:.1f} m/s")  # a misspelt field
    with pytest.raises(UserError) as err:
        PlannerEngine(ServeSettings(PlannerSpec.model(ckpt, {"mode": "ar", "batch": 1}), max_wait_ms=0))
    message = str(err.value)
    assert message.startswith(f"--checkpoint {ckpt}: ") and "comand" in message and "\n" not in message
