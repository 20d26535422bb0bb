"""A user's model with its own chat template and two cameras, command by command as a user runs them, no code
change: `model build` + `model convert --chat-template FILE` (a layout that is neither wamdiff's nor Qwen's), the
served prompt and answer format recorded in its `config.json` (docs/guides/serve.md), a WAM-Diff2 JSON of
two-image samples; `train` two steps on it, `eval openloop --data` on it, the server plans from two images (and
refuses one), and `bench --data` times those same samples' own prompts and reports which it timed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from test_eval_own_inputs import FMT, SERVED, _two_camera_json
from test_reliability_errors import assert_user_error, cli
from test_training_fixtures import one_thread


ROOT = Path(__file__).resolve().parents[1]
# the user's layout: "### role:" headers, no ChatML turns
TEMPLATE = ("{%- for message in messages %}{{- '### ' + message.role + ':\\n' }}{%- if message.content is string %}"
            "{{- message.content }}{%- else %}{%- for item in message.content %}{%- if item.type == 'image' %}"
            "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- else %}{{- item.text }}{%- endif %}{%- endfor %}"
            "{%- endif %}{{- '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '### assistant:\\n' }}{%- endif %}")
IDS = ["s0", "s1", "s2"]


def _two_camera_samples(folder: Path) -> Path:
    return _two_camera_json(folder, [np.stack([np.arange(1, 9) * (2.0 + i), np.linspace(0, 0.4 * i, 8)], 1)
                                     for i in range(len(IDS))])


def _ok(res):
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def test_own_template_two_cameras_train_eval_serve_bench(tmp_path):
    from wamdiff.models import encode_prompt, image_processor_for, load_model

    (tmp_path / "driver.jinja").write_text(TEMPLATE)
    ar, b4, run = tmp_path / "ar", tmp_path / "b4", tmp_path / "run"
    data = _two_camera_samples(tmp_path)
    with one_thread():
        _ok(cli("model", "build", "--preset", "tiny", "--out", ar))
        _ok(cli("model", "convert", ar, "--block-size", "4", "--chat-template", tmp_path / "driver.jinja", "--out", b4))
        config = json.loads((b4 / "config.json").read_text())
        config.update(wamdiff_prompt=SERVED, wamdiff_answer_format=FMT)  # the user's two cameras, their answers
        (b4 / "config.json").write_text(json.dumps(config))

        # the prompt of a sample: the user's layout, two image spans of one image's tokens each
        model, tok = load_model(b4)
        proc = image_processor_for(model)
        one = int(encode_prompt(tok, "<image>", [np.zeros((64, 64, 3), np.uint8)], image_processor=proc)
                  .mm_token_type_ids.sum())
        assert one == 16  # 64x64 at patch 8, merge 2

        _ok(cli("train", "--recipe", ROOT / "configs/recipes/block8.yaml", "--set", f"model.init={b4}",
                "--set", "model.block_size=4", "--set", f"data.train=[{data}]", "--set", f"data.val={data}",
                "--set", "eval.qa.path=null", "--set", "eval.at_start=false", "--set", "optim.steps=2",
                "--set", "optim.batch_size=3", "--set", 'optim.mixed_precision="no"', "--set", "checkpoint.every=0",
                "--set", "log.progress=false", "--set", "log.tensorboard=false", "--set", f"output_dir={run}"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["final_train_loss"] > 0 and metrics["val_loss"] > 0
    final = run / "final"
    assert (final / "chat_template.jinja").read_text() == TEMPLATE  # the template and the served prompt travel
    assert json.loads((final / "config.json").read_text())["wamdiff_prompt"] == SERVED

    from wamdiff.training.data import load_examples

    model, tok = load_model(final)
    examples = load_examples(data, tok, vision=True, image_processor=image_processor_for(model))
    text = tok.decode(examples[0].prompt.input_ids)
    assert text.startswith("### user:\nFront camera: <|vision_start|>") and text.endswith("### assistant:\n")
    assert "<|im_start|>" not in text and text.count("<|vision_start|>") == 2
    assert [int(e.prompt.mm_token_type_ids.sum()) for e in examples] == [2 * one] * 3

    # open loop on the samples: each planned from its own prompt, both cameras
    spec = f"model:{final},mode=block,batch=3,max_steps=2,max_new_tokens=24"
    with one_thread():
        res = _ok(cli("eval", "openloop", "--data", data, "-p", spec, "--out", tmp_path / "ol"))
    (agg,) = [p for p in (tmp_path / "ol").glob("openloop_model*.json")]
    overall = json.loads(agg.read_text())["overall"]
    assert overall["n"] == 3 and overall["n_failed"] == 0 and overall["ade"] > 0
    assert json.loads((tmp_path / "ol" / "plans.json").read_text())["scene_ids"] == IDS

    # the server: two cameras (n_images 2), a one-image request is a 422
    from fastapi.testclient import TestClient

    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.eval.wire import encode_png
    from wamdiff.serve.app import create_app
    from wamdiff.serve.batcher import BatchingConfig
    from wamdiff.serve.planner_engine import PlannerEngine, ServeSettings

    with one_thread():
        engine = PlannerEngine(ServeSettings(PlannerSpec.model(final, {"mode": "block", "batch": 1, "max_steps": 2,
                                                                       "max_new_tokens": 24}), max_wait_ms=0))
        png = base64.b64encode(encode_png(np.zeros((engine.image_size,) * 2 + (3,), np.uint8))).decode("ascii")
        request = {"command": "left", "velocity": [8.0, 0.0], "acceleration": [0.0, 0.0]}
        with TestClient(create_app(engine, BatchingConfig(1, 0.0))) as client:
            info = client.get("/info").json()
            two = client.post("/plan", json={"images": [png, png], **request})
            single = client.post("/plan", json={"image": png, **request})
    assert info["n_images"] == 2 and info["format"] == FMT
    assert two.status_code == 200 and two.json()["ok"] and len(two.json()["waypoints"]) == 8, two.text
    assert single.status_code == 422 and "the model takes 2" in single.json()["error"]

    # the bench times the samples' own prompts (both images each) and says which
    with one_thread():
        res = _ok(cli("bench", "--checkpoint", final, "--data", data, "--n-prompts", "3", "--quick", "--max-steps", "2",
                      "--caches", "exact", "--no-step-cost", "--confirm-repeats", "0", "--no-roofline",
                      "--out", tmp_path / "bench"))
    assert f"3 samples of {data}" in " ".join(res.stdout.split())
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert bench["inputs"] == {"data": str(data), "prompts": 3, "ids": IDS, "images": [2, 2, 2],
                               "image_tokens": [2 * one] * 3}
    assert bench["rows"] and all(r["prompts"] == 3 and r["quality"]["l2_vs_expert"] is not None for r in bench["rows"])

    # a sample whose placeholders and images disagree: one line naming the file and the sample, exit 2
    bad = tmp_path / "bad.json"
    samples = json.loads(data.read_text())
    bad.write_text(json.dumps([{**samples[0], "image": samples[0]["image"][:1]}]))
    assert_user_error(cli("bench", "--checkpoint", final, "--data", bad, "--quick", "--out", tmp_path / "bad_bench"),
                      str(bad), "'s0'", "2 '<image>' placeholder(s) but 1 image(s)")
