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


def test_block_auto_without_an_at_quality_setting_is_refused_at_start(tiny_checkpoint, tmp_path, monkeypatch):
    """`block=auto` whose tuned dial has no setting at AR quality would fail every plan: it is a configuration
    error found when the planner is built, one line through the CLI (exit 2)."""
    import shutil

    from typer.testing import CliRunner

    from wamdiff.cli import app
    from wamdiff.decoding.dial import CURVE_FILE, CurvePoint, DialCurve, model_fingerprint

    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path / "cache"))
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    model, _ = models.load_model(ckpt)

    def curve(l2):
        pts = [CurvePoint(4, 0.9, 4, "exact", [[[4]]], [4], {"l2_vs_expert": l2, "parse_failures": 0})]
        return DialCurve(model_fingerprint(model), "delta", 10, [4], {"l2_vs_expert": 1.0, "parse_failures": 0}, pts)

    spec = f"model:{ckpt},block=auto"
    with pytest.raises(ValueError, match="no tuned speed dial"):
        make_planner(spec).prepare()
    curve(1.5).save(ckpt / CURVE_FILE)
    with pytest.raises(ValueError, match="no setting of this model's tuned speed dial keeps AR's quality"):
        make_planner(spec).prepare()
    scene = straight_road_scene(speed=8.0, scene_id="s0")
    scene.image = np.zeros((64, 64, 3), np.uint8)
    scene.save(tmp_path / "scenes" / "s0")
    res = CliRunner().invoke(app, ["eval", "pdms", "-p", spec, "--data", str(tmp_path / "scenes"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "keeps AR's quality" in res.output and "Traceback" not in res.output
    curve(1.05).save(ckpt / CURVE_FILE)
    make_planner(spec).prepare()  # a setting within 10 % of AR: accepted
