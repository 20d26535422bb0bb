"""A user's VLA with its own (Qwen) chat template and two cameras per sample, through the library with no code
change: a WAM-Diff2 JSON whose samples hold two images trains two steps (with its validation loss), the trained
checkpoint keeps the template, `bench` decodes its prompts, and `serve` plans with it (in process, from the world's
one-camera prompt; a checkpoint that records a two-camera prompt, evaluated on its own JSON and served two images:
tests/test_eval_own_inputs.py)."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
from test_training_fixtures import one_thread, tiny_recipe
from typer.testing import CliRunner

from wamdiff.cli import app
from wamdiff.driving.trajectory import format_trajectory
from wamdiff.models import build_model, build_tokenizer, encode_prompt, image_processor_for, load_model, save_model
from wamdiff.models import tokens as T
from wamdiff.models.standin import QWEN_CHAT_TEMPLATE
from wamdiff.training import train
from wamdiff.training.data import load_examples

HUMAN = ("Front camera: <image>\nRear camera: <image>\nThe navigation information is: {cmd}\n"
         "Predict 8 waypoints for the next 4 seconds.")


def _two_camera_json(folder, n=4):
    rng = np.random.default_rng(0)
    samples = []
    for i in range(n):
        names = [f"s{i}_front.png", f"s{i}_rear.png"]
        for name in names:
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / name)
        xy = np.stack([np.arange(1, 9) * (2.0 + i), np.linspace(0, 0.4 * i, 8)], 1)
        samples.append({"id": f"s{i}", "image": names, "conversations": [
            {"from": "human", "value": HUMAN.format(cmd=("left", "straight")[i % 2])},
            {"from": "gpt", "value": format_trajectory(xy, "text2")}]})
    path = folder / "train.json"
    path.write_text(json.dumps(samples))
    return path


def test_qwen_template_two_cameras_train_and_bench(tmp_path):
    tok = build_tokenizer()
    tok.chat_template = QWEN_CHAT_TEMPLATE  # the user's model: Qwen's template in its tokenizer
    save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "user_vla")
    data = _two_camera_json(tmp_path)

    # the prompts: Qwen's system turn, two image spans of 16 merged patches each (64x64 at patch 8, merge 2)
    model, loaded = load_model(tmp_path / "user_vla")
    ex = load_examples(data, loaded, vision=True, image_processor=image_processor_for(model))
    assert len(ex) == 4 and ex[0].prompt.image_grid_thw.shape == (2, 3) and int(ex[0].prompt.mm_token_type_ids.sum()) == 32
    text = loaded.decode(ex[0].prompt.input_ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nFront camera: ")
    assert text.count(T.VISION_START) == 2 and text.endswith("<|im_end|>\n<|im_start|>assistant\n")

    recipe = tiny_recipe({"train": data}, tmp_path / "run", "block", model={"preset": None, "init": str(tmp_path / "user_vla")},
                         optim={"steps": 2}, eval={"at_start": False, "at_end": True})
    with one_thread():
        train(recipe)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["final_train_loss"] > 0
    final = tmp_path / "run" / "final"
    assert (final / "chat_template.jinja").read_text() == QWEN_CHAT_TEMPLATE  # the template travels with the model
    model2, tok2 = load_model(final)
    again = encode_prompt(tok2, HUMAN.format(cmd="left"), [np.zeros((64, 64, 3), np.uint8)] * 2,
                          image_processor=image_processor_for(model2))
    assert again.input_ids.tolist()[:len(ex[0].prompt.input_ids)] == ex[0].prompt.input_ids.tolist()

    with one_thread():
        res = CliRunner().invoke(app, ["bench", "--checkpoint", str(final), "--data", str(data), "--n-prompts", "2",
                                       "--quick", "--max-steps", "2", "--caches", "exact", "--no-step-cost",
                                       "--out", str(tmp_path / "bench")])
    assert res.exit_code == 0, res.output
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert bench["rows"] and all(r["ar"]["tok_s"] > 0 and r["diffusion"]["tok_s"] > 0 for r in bench["rows"])

    from fastapi.testclient import TestClient

    from wamdiff.eval.synthetic import straight_road_scene
    from wamdiff.eval.wire import scene_request
    from wamdiff.serve.app import create_app
    from wamdiff.serve.batcher import BatchingConfig
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings

    with one_thread():
        spec = PlannerSpec.model(final, {"mode": "block", "fmt": "text2", "batch": 1, "max_steps": 2,
                                         "max_new_tokens": 16})
        engine = PlannerEngine(ServeSettings(spec, max_wait_ms=0))
        scene = straight_road_scene(speed=8.0, scene_id="s")
        scene.image = np.zeros((engine.image_size, engine.image_size, 3), np.uint8)
        with TestClient(create_app(engine, BatchingConfig(1, 0.0))) as client:
            reply = client.post("/plan", json=scene_request(scene))
    assert reply.status_code == 200, reply.text
    assert reply.json()["timing"]["new_tokens"] > 0 and "reason" in reply.json()
