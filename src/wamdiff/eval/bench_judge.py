"""The speed bench's scene judge (`decoding.bench.judge`): the answer texts of the bench's prompts scored by PDMS and
comfort on the prompts' own scenes, the way `wamdiff eval pdms` scores a model planner (`eval.run.evaluate_open`):
each text parsed in its answer format and checked (`planners.plan_from_text`; one that does not parse is a failed
plan and scores 0), scored by `PDMSEvaluator` (the reference planner computed once per scene and cached), and
averaged as `pdms.aggregate` averages (over the valid scenes).

Scenes: the bench's prompts are the samples of a WAM-Diff2 file written by `wamdiff data generate`
(`driving.dataset`), whose ids are their scene names: a sample's scene is its `meta.scene` (`scenes/<name>.npz`,
relative to the file), else `<name>.npz` beside its image `<scenes>/<name>.png`.
"""

from __future__ import annotations

from pathlib import Path

from wamdiff.driving.answer_format import guess_format
from wamdiff.eval.pdms import PDMSConfig, PDMSEvaluator, aggregate
from wamdiff.eval.planners import plan_from_text


class BenchJudge:
    """`judge(texts)`: text i scored on scene i -> {"pdms": mean PDMS 0-100, "comfort": mean comfort C 0-1} (None
    when no scene is valid). Every (scene, text) is scored once: AR's answers, re-decoded beside every grid point,
    and settings that answer alike cost nothing more."""

    def __init__(self, scenes: list, fmts: list[str | None], evaluator: PDMSEvaluator | None = None):
        if len(scenes) != len(fmts):
            raise ValueError(f"bench judge: {len(scenes)} scenes but {len(fmts)} answer formats")
        self.scenes, self.fmts = scenes, fmts
        self.evaluator = evaluator or PDMSEvaluator()
        self._rows: dict[tuple[int, str], dict] = {}

    def __call__(self, texts: list[str]) -> dict:
        if len(texts) > len(self.scenes):
            raise ValueError(f"bench judge: {len(texts)} answers but only {len(self.scenes)} scenes to judge them on")
        todo = [i for i, t in enumerate(texts) if (i, t) not in self._rows]
        if todo:
            plans = [plan_from_text(texts[i], self.fmts[i] or guess_format(texts[i]) or "text2") for i in todo]
            for i, row in zip(todo, self.evaluator.score([self.scenes[i] for i in todo], plans, "bench")):
                self._rows[(i, texts[i])] = {k: v for k, v in row.items() if not k.startswith("_")}  # no state arrays
        overall = aggregate([self._rows[(i, t)] for i, t in enumerate(texts)])["overall"]
        return {"pdms": None if overall["pdms"] is None else 100 * overall["pdms"], "comfort": overall["c"]}


def scene_file(sample, data: Path) -> Path | None:
    """The scene file of a WAM-Diff2 sample of `data`, or None when there is none (see the module docstring)."""
    candidates = [data.parent / sample.meta["scene"]] if isinstance(sample.meta.get("scene"), str) else []
    candidates += [Path(p).with_name(f"{sample.id}.npz") for p in sample.image_paths]
    return next((c for c in candidates if c.is_file()), None)


def judge_for_data(data: Path, n: int, fmt: str | None = None, *, required: bool = False,
                   reference_cache: str | Path | None = None) -> BenchJudge | None:
    """A judge of the first `n` samples of the WAM-Diff2 file `data` (the bench's prompts, in order), in the answer
    format `fmt` (None: each sample's, from its expert answer). Returns None when a sample has no scene file, unless
    `required` (then ValueError naming the file and the sample). `reference_cache`: a folder of cached reference
    plans (the pipeline's evaluation keeps one; the same scenes need not be planned again)."""
    from wamdiff.driving.scene import Scene
    from wamdiff.driving.wamdiff2_json import read_samples

    data = Path(data)
    samples = read_samples(data)[:n]
    files = [scene_file(s, data) for s in samples]
    missing = [s for s, f in zip(samples, files) if f is None]
    if missing or not samples:
        if not required:
            return None
        if not samples:
            raise ValueError(f"{data}: no samples to judge the bench's answers on")
        s = missing[0]
        raise ValueError(f"{data}: sample {s.id!r} ({s.where}): no scene file {s.id}.npz beside its image or at its "
                         "'scene' field, so its answers cannot be scored by PDMS; use a dataset written by "
                         "`wamdiff data generate`, or --no-judge")
    scenes = [Scene.load(f) for f in files]  # an unreadable scene names its file
    fmts = [fmt or guess_format(s.answer) for s in samples]
    cache = None if reference_cache is None else str(reference_cache)
    return BenchJudge(scenes, fmts, PDMSEvaluator(PDMSConfig(reference_cache=cache)))
