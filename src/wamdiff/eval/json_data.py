"""Open-loop evaluation on a user's own WAM-Diff2 JSON (`wamdiff eval openloop --data samples.json`).

Each sample is planned from its OWN prompt: its human turn and its images (however many cameras), encoded as
training encodes it (`driving.wamdiff2_json.encode_sample_prompt`, through the model's chat template), decoded by
the model planner (`eval.planners.ModelPlanner`), parsed in the checkpoint's answer format; the sample's `gpt`
answer, parsed in the same format, is the logged future the plan is measured against (`eval.openloop`: L2 per 0.5 s
step, ADE/FDE, failed plans). A sample stands in for a scene (`JsonSample`), so the scene evaluation's planning, aggregation and
files are the same (`eval.run.evaluate_open` with no PDMS). A sample has no other agents and no ego state outside
its prompt text: no collision rate, no hard-braking split.

Only model planners take a sample (expert, cv and reference need a simulator scene; a planner server's wire format
carries a scene's fields, not a prompt). Everything that can be wrong with the file (a missing field, an image file
that does not open, a `gpt` answer that is no trajectory, a prompt whose `<image>` count is not its image count) is
found before any planning: a ValueError naming the file, the sample and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

JSON_SUFFIXES = (".json", ".jsonl")
FAMILY = "json"  # the per-family key of a sample's row


def is_json_data(data: str | Path) -> bool:
    """`--data` names a WAM-Diff2 file (not a folder of scenes)."""
    return Path(data).suffix.lower() in JSON_SUFFIXES and not Path(data).is_dir()


@dataclass
class JsonSample:
    """A WAM-Diff2 sample where the evaluation expects a scene: its id, its answer as the logged future (8, 3; the
    heading column is 0, unused by open-loop metrics) and the sample itself, which the model planner encodes."""

    scene_id: str
    future: np.ndarray
    sample: object  # driving.wamdiff2_json.ConversationSample
    family: str = FAMILY
    split: str = ""
    ego_speed: float | None = None
    ego_accel: float | None = None
    future_known: bool = True  # an all-zero answer (standing still) is a future, not a missing one


def refuse_scene_planners(specs: dict, data: str | Path) -> None:
    """Only model planners plan a sample: any other is a UserError naming it."""
    from wamdiff.errors import UserError

    for spec in specs.values():
        if spec.kind == "model" and spec.fallback is not None:
            raise UserError(f"planner {spec.text!r}: fallback= needs simulator scenes (the fallback plans from the "
                             f"scene); {data} holds WAM-Diff2 samples: drop fallback=")
        if spec.kind != "model":
            raise UserError(f"planner {spec.text!r} needs simulator scenes (a scene folder as --data); {data} holds "
                             "WAM-Diff2 samples, which only model:CKPT planners plan (from each sample's own prompt)")


def load_json_samples(path: str | Path, specs: dict, limit: int | None = None) -> list[JsonSample]:
    """The samples of a WAM-Diff2 file, checked for every model planner in `specs` (all share one answer format)."""
    from wamdiff.driving.wamdiff2_json import read_samples, sample_images
    from wamdiff.errors import UserError
    from wamdiff.eval.planners import plan_from_text
    from wamdiff.models.tokens import IMAGE_PLACEHOLDER
    from wamdiff.models.recorded import is_vision

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--data {path}: no such file (a WAM-Diff2 .json / .jsonl of samples, or a scene folder)")
    fmts = sorted({spec.fmt for spec in specs.values()})
    if len(fmts) != 1:
        raise UserError(f"--data {path}: the planners parse answers in different formats {fmts}; one format per "
                        "file (set fmt= on the planner specs)")
    fmt = fmts[0]
    try:
        samples = read_samples(path)  # a missing or malformed field: names the file, line and field
    except ValueError as err:
        raise UserError(str(err)) from None
    if limit is not None:
        samples = samples[:limit]
    if not samples:
        raise UserError(f"--data {path}: no samples")
    vision = any(is_vision(spec.checkpoint) for spec in specs.values())
    out = []
    for s in samples:
        where = f"{s.where or path}: sample {s.id!r}"
        expert = plan_from_text(s.answer, fmt)
        xy, reason = expert.xy, expert.reason
        if not expert.ok:
            raise UserError(f"{where}: field conversations (gpt value): not a trajectory in answer format {fmt} "
                            f"({reason}); set fmt= on the planner spec to the file's format")
        if vision:
            n = s.human.count(IMAGE_PLACEHOLDER)
            if n != len(s.image_paths):
                raise UserError(f"{where}: field conversations (human value) has {n} {IMAGE_PLACEHOLDER} placeholder(s) "
                                f"but field 'image' names {len(s.image_paths)} image(s)")
            sample_images(s, path)  # every image opens (a UserError naming the file, sample and field otherwise)
        future = np.zeros((8, 3))
        future[:, :2] = xy
        out.append(JsonSample(str(s.id), future, s))
    return out
