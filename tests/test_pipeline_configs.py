"""The shipped pipeline configs (default, demo, studies) hang together: every stage a row, an `init`, a `teacher`,
an `average`, the bench or the overlap names exists in the same config (a training stage before it, or a `checkpoints:` entry),
and every recipe file exists. A renamed stage used to surface only when the evaluation ran, an hour in."""

from pathlib import Path

import pytest

from wamdiff.orchestration.pipeline import _read_config

ROOT = Path(__file__).resolve().parents[1]


def _write_rounds(data_dir: Path, sizes: dict[int, int]) -> None:
    """Aggregation rounds of `sizes[r]` placeholder samples each, where a pipeline's `agg_rounds` look for them."""
    from wamdiff.driving.wamdiff2_json import ConversationSample, write_samples
    from wamdiff.eval.aggregation import round_files

    for r, n in sizes.items():
        write_samples([ConversationSample(id=f"r{r}_{i}", image_paths=[], human="h", answer="a") for i in range(n)],
                      round_files(data_dir, r)[0])
CONFIGS = sorted([ROOT / "configs" / "default.yaml", ROOT / "configs" / "demo.yaml", ROOT / "configs" / "small.yaml",
                  *(ROOT / "configs" / "studies").glob("*.yaml")])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_stage_reference_names_a_stage_or_a_checkpoint(path):
    cfg = _read_config(path)
    known = set(cfg.get("checkpoints") or {})
    for stage in cfg.get("train") or []:
        for key in ("init", "teacher"):
            if key in stage:
                assert stage[key] in known, f"{path.name}: stage {stage['name']} {key}={stage[key]!r} comes later or nowhere"
        if "aggregate" in stage:
            assert stage["aggregate"]["planner"].split(",")[0] in known, f"{path.name}: {stage['name']} aggregates an unknown planner"
        for name in stage.get("average") or ():
            assert name in known, f"{path.name}: stage {stage['name']} averages {name!r}, which comes later or nowhere"
        if "recipe" in stage:
            assert (ROOT / stage["recipe"]).is_file(), f"{path.name}: {stage['recipe']} missing"
        known.add(stage["name"])
    ev = cfg.get("evaluate") or {}
    for row, spec in (ev.get("planners") or {}).items():
        if spec.startswith("stage:"):
            assert spec[len("stage:"):].split(",")[0] in known, f"{path.name}: row {row!r} names {spec!r}"
    overlap = ev.get("top5_overlap") or {}
    for key in ("student", "diffusion_teacher", "ar_teacher"):
        if key in overlap:
            assert overlap[key] in known, f"{path.name}: top5_overlap.{key}={overlap[key]!r}"
    for key in ("ar", "diffusion"):
        if key in (cfg.get("bench") or {}):
            assert cfg["bench"][key] in known, f"{path.name}: bench.{key}={cfg['bench'][key]!r}"


def test_a_replace_tagged_mapping_replaces_the_base_instead_of_merging(tmp_path):
    (tmp_path / "base.yaml").write_text("out: o\nevaluate: {planners: {a: expert, b: cv}, workers: 2}\n")
    (tmp_path / "merge.yaml").write_text("base: base.yaml\nevaluate: {planners: {c: reference}}\n")
    (tmp_path / "replace.yaml").write_text("base: base.yaml\nevaluate:\n  planners: !replace {c: reference}\n")
    assert _read_config(tmp_path / "merge.yaml")["evaluate"] == {"planners": {"a": "expert", "b": "cv", "c": "reference"},
                                                                 "workers": 2}
    assert _read_config(tmp_path / "replace.yaml")["evaluate"] == {"planners": {"c": "reference"}, "workers": 2}


def test_the_small_chain_trains_only_its_own_stages_from_the_shipped_models():
    from wamdiff.orchestration.pipeline import Pipeline
    from wamdiff.orchestration.schedule import stages_to_run

    p = Pipeline.load(ROOT / "configs" / "small.yaml")
    run = [s["name"] for s in stages_to_run(p.cfg, set(p.checkpoints), p.evaluate, p.bench)]
    default = {s["name"] for s in Pipeline.load(ROOT / "configs" / "default.yaml").cfg["train"]}
    assert run and not set(run) & default  # none of the full-size chain's stages
    assert all(n.startswith("small_") or n.endswith("_small") for n in run)
    assert {"small_l3_none", "small_l3_ar", "small_student"} <= set(run)
    assert set(p.checkpoints) == {"ar_vla", "distill_block"}


def test_route_phase_scenes_join_only_the_stages_that_ask_for_them(tmp_path):
    from wamdiff.orchestration.pipeline import Pipeline, training_sources

    p = Pipeline.load(ROOT / "configs" / "default.yaml")
    p.out = tmp_path
    _write_rounds(p.data_dir, {0: 1})
    stages = {s["name"]: s for s in p.cfg["train"] if "recipe" in s}
    paths = {name: {Path(s["path"]).relative_to(p.out).as_posix(): s["weight"] for s in training_sources(p, stages[name])}
             for name in ("ar_vla_r0", "ar_phases")}
    assert paths["ar_phases"] == {**paths["ar_vla_r0"], "data_phases/train.json": 1.0}  # the only difference
    assert paths["ar_vla_r0"]["data/train.json"] == 1.0 and paths["ar_vla_r0"]["data/agg_r0.json"] == 0.5
    p.data = p.data.model_copy(update={"phases": None})
    with pytest.raises(ValueError, match="needs data.phases"):
        training_sources(p, stages["ar_phases"])


def test_a_stage_can_name_its_aggregation_rounds(tmp_path):
    """The recovery study's arms each train on round 0 plus their own round, weighted by size as if merged; the
    default's mature mixture on rounds 0, 3, 4, 5 and the route-phase scenes; a stage without `agg_rounds` takes
    every round so far (agg.json)."""
    from wamdiff.orchestration.pipeline import Pipeline, training_sources

    p = Pipeline.load(ROOT / "configs" / "studies" / "recovery.yaml")
    p.out = tmp_path
    _write_rounds(p.data_dir, {0: 3, 1: 1, 2: 5, 3: 2, 4: 4, 5: 6})
    stages = {s["name"]: s for s in p.cfg["train"] if "recipe" in s}

    def weights(name):
        return {Path(s["path"]).name: s["weight"] for s in training_sources(p, stages[name])}

    qa = {"train.json": 1.0, "train_qa.json": p.data.qa_weight}
    assert weights("ar_recover") == {**qa, "agg_r0.json": pytest.approx(0.5 * 3 / 4),
                                     "agg_r1.json": pytest.approx(0.5 * 1 / 4)}
    assert weights("ar_dagger2") == {**qa, "agg_r0.json": pytest.approx(0.5 * 3 / 8),
                                     "agg_r2.json": pytest.approx(0.5 * 5 / 8)}
    mature = {**stages["ar_vla"], "phases": 0}  # its route-phase scenes: the test above
    assert {Path(s["path"]).name: s["weight"] for s in training_sources(p, mature)} == {
        **qa, **{f"agg_r{r}.json": pytest.approx(0.5 * n / 15) for r, n in ((0, 3), (3, 2), (4, 4), (5, 6))}}
    assert {Path(s["path"]).name: s["weight"] for s in training_sources(p, {"name": "x", "agg": 0.5})} == {
        **qa, "agg.json": 0.5}


def test_the_conversion_trains_on_one_mixture_it_can_make_from_the_ar_vla(tmp_path, monkeypatch):
    """Every stage after the AR VLA sees the same data: the expert scenes, the route-phase scenes, the busier and
    faster traffic (`data.train_variants`, each set by its size) and the round the given AR VLA drives itself
    (round 6), never the rounds of the AR chain, which exist only when `--from-scratch` trains that chain; the
    stages after `block32` add the round the student drives (round 7); the level-2 stages also the expert scenes that
    start in hard braking, once more (`hard_braking`)."""
    import wamdiff.driving.dataset as dataset
    from wamdiff.orchestration.pipeline import Pipeline, training_sources

    monkeypatch.setattr(dataset, "write_hard_braking_split", lambda data: Path(data) / "train_hard_braking.json")

    p = Pipeline.load(ROOT / "configs" / "default.yaml")
    p.out = tmp_path
    _write_rounds(p.data_dir, dict.fromkeys([*range(8), 12, 13], 1))
    stages = {s["name"]: s for s in p.cfg["train"] if "recipe" in s}

    def mixture(name):
        return sorted((Path(s["path"]).relative_to(p.out).as_posix(), s["weight"]) for s in training_sources(p, stages[name]))

    variants = {n: v for n, v in p.data.train_variants.items() if not v.opt_in}  # an opt-in set only where named
    total = sum(v.per_family for v in variants.values())
    base = [("data/train.json", 1.0), ("data/train_qa.json", p.data.qa_weight), ("data_phases/train.json", 1.0),
            *[(f"data_train_{n}/train.json", pytest.approx(v.per_family / total)) for n, v in variants.items()]]
    for name in ["block1", "block4", "block8", "block16", "block32", "teacher_ar", "teacher_block4", "teacher_block32"]:
        assert mixture(name) == sorted([*base, ("data/agg_r6.json", 0.5)]), name
    both_rounds = [*base, ("data/agg_r6.json", 0.25), ("data/agg_r7.json", 0.25)]
    for name in ["distill_block_s0", "distill_block_s1"]:  # the two seeds the main student averages
        assert mixture(name) == sorted([*both_rounds, ("data/train_hard_braking.json", 0.25)]), name
    assert mixture("distill_model") == sorted(both_rounds)
    # the main student's fine-tunes: its own rounds join at the rounds' share, each by its size
    own = [("data/agg_r6.json", 0.125), ("data/agg_r7.json", 0.125), ("data/agg_r12.json", 0.125),
           ("data/agg_r13.json", 0.125), ("data/train_hard_braking.json", 0.25)]
    assert mixture("main_dagger2") == sorted([*base, *own])
    # the main student: the same mixture plus the two opt-in fast sets, each at share 0.5, from their labels alone
    fast_sets = [s for s in training_sources(p, stages["main_wide_mix"]) if "faster" in s["path"] or "fastest" in s["path"]]
    assert mixture("main_wide_mix") == sorted([*base, *own, ("data_train_faster/train.json", 0.5),
                                               ("data_train_fastest/train.json", 0.5)])
    assert [s.get("distil") for s in fast_sets] == [False, False]
    # the shifted main student: the same mixture, the QA pairs from their labels at share 0.6, the slow sets taught,
    # the fast ones (route starts at twice their share, along the routes at 0.5) from their labels alone
    shifted = {Path(s["path"]).relative_to(p.out).parent.as_posix(): s for s in training_sources(p, stages["sh_qa2"])}
    assert mixture("sh_qa2") == sorted([*[b for b in base if b[0] != "data/train_qa.json"], *own,
                                               ("data/train_qa.json", 0.6),
                                               *[(f"data_train_{n}/train.json", w) for n, w in (
                                                   ("faster", 1.0), ("fastest", 1.0), ("faster_along", 0.5),
                                                   ("slow", 0.5), ("slowest_dense", 0.5))]])
    assert {n: shifted[n].get("distil", True) for n in ("data", "data_train_slow", "data_train_faster_along")} == {
        "data": True, "data_train_slow": True, "data_train_faster_along": False}
    assert [s.get("distil") for s in training_sources(p, stages["sh_qa2"])
            if s["path"].endswith("train_qa.json")] == [False]
    chain, name = [], "sh_qa2"  # converted from the AR VLA with shifted prediction, through shifted stages only
    while name != "ar_vla":
        chain.append(name)
        name = stages[name]["init"]
    assert name == "ar_vla" and all(n.startswith("sh_") for n in chain) and len(chain) == 13
    assert stages[chain[-1]]["set"]["diffusion.prediction"] == "shifted"
    assert mixture("main_dagger") == sorted([*base, *[(f, 0.5 / 3) for f in ("data/agg_r6.json", "data/agg_r7.json",
                                                                             "data/agg_r12.json")],
                                              ("data/train_hard_braking.json", 0.25)])
    for name in ["ar_sft", "ar_vla"]:  # the AR VLA's own chain never sees them
        assert not any("data_train_" in path for path, _ in mixture(name)), name
    p.data = p.data.model_copy(update={"train_variants": {}})
    with pytest.raises(ValueError, match="needs data.train_variants"):
        training_sources(p, stages["block32"])
    producer = {s["aggregate"]["round"]: s["aggregate"]["planner"] for s in p.cfg["train"] if "aggregate" in s}
    assert producer[6] == "ar_vla" and "ar_vla" in p.cfg["checkpoints"]
    assert producer[7].split(",")[0] == "block32"


def test_a_stage_sets_its_qa_share_and_names_the_traffic_sets_it_mixes(tmp_path, monkeypatch):
    """`qa: w` or `qa: {weight, distil}` replaces `data.qa_weight` for one stage (`distil: false` reaches the QA
    source); `train_variants: {name: share}` mixes each named set at its own share, opt-in sets too, while
    `train_variants: w` leaves the opt-in ones out; a bad share or an unknown set name is one line naming the stage."""
    from wamdiff.errors import UserError
    from wamdiff.orchestration.pipeline import Pipeline, check_config_keys, training_sources

    import wamdiff.driving.dataset as dataset

    monkeypatch.setattr(dataset, "write_hard_braking_split", lambda data: Path(data) / "train_hard_braking.json")
    p = Pipeline.load(ROOT / "configs" / "studies" / "robustness.yaml")  # the default + opt-in faster traffic sets
    p.out = tmp_path
    _write_rounds(p.data_dir, dict.fromkeys([6, 7, 12, 13], 1))
    opt_in = [n for n, v in p.data.train_variants.items() if v.opt_in]
    assert opt_in == ["faster", "fastest", "slow", "slowest_dense", "faster_along", "faster_roads", "fastest_roads"]
    stages = {s["name"]: s for s in p.cfg["train"] if "recipe" in s}
    # the study's speed arm adds the faster traffic, which its teacher does not score; its control does not
    fast = {Path(s["path"]).parent.name: s.get("distil", True) for s in training_sources(p, stages["main_fast"])}
    more = {Path(s["path"]).parent.name for s in training_sources(p, stages["main_more"])}
    assert fast["data_train_faster"] is False and set(fast) - more == {"data_train_faster"}
    assert [k for k, distil in fast.items() if not distil] == ["data_train_faster"]

    def mixture(spec):
        return {Path(s["path"]).relative_to(p.out).as_posix(): (s["weight"], s.get("distil", True))
                for s in training_sources(p, {"name": "x", **spec})}

    assert mixture({"qa": {"weight": 0.6, "distil": False}}) == {"data/train.json": (1.0, True),
                                                                  "data/train_qa.json": (0.6, False)}
    assert mixture({"qa": {"distil": False}})["data/train_qa.json"] == (p.data.qa_weight, False)
    assert "data/train_qa.json" not in mixture({"qa": {"weight": 0}})
    named = mixture({"train_variants": {"faster": 0.5, "fast": 0.25}})
    assert {k: v for k, v in named.items() if "data_train_" in k} == {"data_train_faster/train.json": (0.5, True),
                                                                       "data_train_fast/train.json": (0.25, True)}
    assert not any("faster" in k for k in mixture({"train_variants": 1.0}))
    with pytest.raises(ValueError, match="train_variants: no data.train_variants set 'fastests'"):
        mixture({"train_variants": {"fastests": 1.0}})
    with pytest.raises(UserError, match="train_variants.faster: give its weight"):
        mixture({"train_variants": {"faster": {"distil": False}}})
    assert mixture({"qa": 0.3})["data/train_qa.json"] == (0.3, True)  # a number is the weight
    for bad, why in [("lots", "qa: the weight must be a number >= 0"), ({"weight": -1}, "the weight must be"),
                     ({"distil": "no"}, "qa: distil must be true or false"), ({"weigth": 1}, "weigth")]:
        with pytest.raises(UserError, match=f"c.yaml: stage 's': .*{why}"):
            check_config_keys({"train": [{"name": "s", "qa": bad}]}, Path("c.yaml"))
    with pytest.raises(UserError, match="stage 's': train_variants.faster: distil must be true or false"):
        check_config_keys({"train": [{"name": "s", "train_variants": {"faster": {"distil": 1}}}]}, Path("c.yaml"))


def test_a_traffic_set_can_be_of_some_road_families_only(tmp_path, monkeypatch):
    """`families` on a `data.train_variants` set makes its scenes in those families alone; `train_variants: w` shares
    w between the sets by their scene counts (per family x families); an unknown family is refused at load."""
    import wamdiff.driving.dataset as dataset
    from wamdiff.orchestration.pipeline import Pipeline, stage_data, train_variant_sources
    from wamdiff.orchestration.sections import TrainVariant

    p = Pipeline.load(ROOT / "configs" / "default.yaml")
    p.out = tmp_path
    sets = {"all": TrainVariant(per_family=100, speed_scale=1.2),
            "fast_roads": TrainVariant(per_family=100, speed_scale=1.5, families=["highway", "merge"])}
    p.data = p.data.model_copy(update={"train_variants": sets, "phases": None, "variants": {}, "formats": []})
    calls = []
    monkeypatch.setattr(dataset, "generate_dataset", lambda out, **kw: calls.append((Path(out).name, kw)) or {})
    stage_data(p, splits=("train",))
    made = {name: kw for name, kw in calls}
    assert made["data_train_fast_roads"]["families"] == ["highway", "merge"]
    assert made["data_train_fast_roads"]["speed_scale"] == 1.5 and "families" not in sets["fast_roads"].settings
    assert made["data_train_all"]["families"] == list(p.data.families) == made["data"]["families"]
    weights = {Path(s["path"]).parent.name: s["weight"]
               for s in train_variant_sources(p, {"name": "s", "train_variants": 1.0}, p.data_dir)}
    assert weights == {"data_train_all": pytest.approx(400 / 600), "data_train_fast_roads": pytest.approx(200 / 600)}
    for bad in (["motorway"], [], ["merge", "merge"]):
        with pytest.raises(ValueError, match="families"):
            TrainVariant(per_family=1, families=bad)


def test_a_stage_can_weight_up_the_scenes_that_start_in_hard_braking(tmp_path):
    """`hard_braking: w` adds the expert scenes whose ego brakes harder than HARD_BRAKING_MS2 at t0 once more, at
    share w: a subset of train.json read from each sample's scene file, written again when train.json is newer."""
    import json
    import os

    from wamdiff.driving.scene import HARD_BRAKING_MS2
    from wamdiff.errors import UserError
    from wamdiff.eval.synthetic import straight_road_scene
    from wamdiff.orchestration.pipeline import Pipeline, training_sources

    p = Pipeline.load(ROOT / "configs" / "default.yaml")
    p.out = tmp_path
    data = p.data_dir
    (data / "scenes").mkdir(parents=True)
    recs = []
    for i, a in enumerate((HARD_BRAKING_MS2 - 1.0, 0.0, HARD_BRAKING_MS2 + 0.1, HARD_BRAKING_MS2 - 0.01)):
        scene = straight_road_scene(speed=10.0, scene_id=f"s{i}")
        scene.ego_history[-1, 5] = a
        scene.save(data / "scenes" / f"s{i}")
        recs.append({"id": f"s{i}", "scene": f"scenes/s{i}.npz", "conversations": []})
    (data / "train.json").write_text(json.dumps(recs))

    def weights(spec):
        return {Path(s["path"]).name: s["weight"] for s in training_sources(p, spec)}

    qa = {"train.json": 1.0, "train_qa.json": p.data.qa_weight}
    assert weights({"name": "plain"}) == qa
    assert weights({"name": "x", "hard_braking": 0.25}) == {**qa, "train_hard_braking.json": 0.25}
    subset = data / "train_hard_braking.json"
    assert [r["id"] for r in json.loads(subset.read_text())] == ["s0", "s3"]
    (data / "train.json").write_text(json.dumps(recs[1:3]))  # the split generated again: the subset follows it
    later = subset.stat().st_mtime + 5
    os.utime(data / "train.json", (later, later))
    weights({"name": "x", "hard_braking": 0.25})
    assert json.loads(subset.read_text()) == []
    (data / "train.json").write_text(json.dumps([{"id": "foreign", "conversations": []}]))
    os.utime(data / "train.json", (later + 5, later + 5))
    with pytest.raises(UserError, match="sample 0 \\(foreign\\): field 'scene'"):
        weights({"name": "x", "hard_braking": 0.25})
