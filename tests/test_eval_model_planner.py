"""ModelPlanner end to end with a tiny untrained checkpoint (skipped while the model/decoding APIs are missing)."""

import numpy as np
import pytest

models = pytest.importorskip("wamdiff.models", reason="wamdiff.models not built yet")
pytest.importorskip("wamdiff.decoding", reason="wamdiff.decoding not built yet")
pytest.importorskip("wamdiff.driving.prompts", reason="scene_prompt not built yet")
pytest.importorskip("wamdiff.driving.trajectory", reason="parse_trajectory not built yet")
if not hasattr(models, "build_model") or not hasattr(models, "save_model"):
    pytest.skip("wamdiff.models.build_model/save_model missing", allow_module_level=True)

from wamdiff.eval.pdms import PDMSEvaluator  # noqa: E402
from wamdiff.eval.planners import make_planner, plan_scenes  # noqa: E402
from wamdiff.eval.synthetic import straight_road_scene  # noqa: E402


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    tok = models.build_tokenizer()
    model = models.build_model("tiny", tok, vision=True, seed=0)
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    models.save_model(model, tok, path)
    return path


@pytest.mark.parametrize("opts", ["mode=ar,max_new_tokens=12", "mode=block,block=4,threshold=0.9,max_new_tokens=12",
                                  "mode=block,block=4,threshold=0.9,max_new_tokens=12,delayed=1"])
def test_untrained_model_decodes_and_its_failed_plans_score_zero(tiny_checkpoint, opts):
    scenes = [straight_road_scene(speed=8.0, scene_id=f"m{i}") for i in range(2)]
    for s in scenes:  # the tiny model's image side
        s.image = np.zeros((64, 64, 3), np.uint8)
    planner = make_planner(f"model:{tiny_checkpoint},{opts}")
    plans = plan_scenes(planner, scenes)
    assert len(plans) == 2
    for p in plans:
        assert p.forwards > 0 and p.new_tokens > 0  # it really decoded
        assert not p.ok and p.xy is None and not p.fallback and p.reason  # 12 random tokens are no trajectory
    rows = PDMSEvaluator().score(scenes, plans, "tiny")
    assert all(r["valid"] and r["plan_failed"] and r["pdms"] == 0.0 for r in rows)
