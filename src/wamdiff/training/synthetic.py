"""A handful of synthetic WAM-Diff2 samples (JSON + 64x64 PNGs) for trainer tests and throughput runs.

Written in the official training-JSON shape (`id`, `image: [paths]`, `conversations` human/gpt) so it goes
through the real reader; answers are trajectories in the 2-decimal text format, QA pairs are short phrases.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PROMPT = (
    "Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: {cmd}\n"
    "The current position is (0.00,0.00)\nThe current velocity is: ({vx:.2f},{vy:.2f}) and current accelerate is: "
    "({ax:.2f},{ay:.2f})\nInstruction: Based on the above information, predict the optimal driving action for the "
    "next 4 seconds with 8 new waypoints."
)
QA = [("Is the lead vehicle braking?", "no"), ("Which lane is the ego vehicle in?", "lane 2 of 3"),
      ("What meta-action does the ego take?", "keep lane"), ("Is there a vehicle in the left lane?", "yes")]


def _image(rng: np.random.Generator, path: Path) -> str:
    from PIL import Image

    arr = np.zeros((64, 64, 3), dtype=np.uint8)
    arr[:] = rng.integers(0, 80, size=3)
    x, y = rng.integers(8, 48, size=2)
    arr[y : y + 10, x : x + 6] = rng.integers(150, 255, size=3)  # one "vehicle"
    Image.fromarray(arr).save(path)
    return str(path)


def trajectory_text(rng: np.random.Generator, n_points: int = 8, fmt: str = "text2") -> str:
    """A smooth curve at a random speed; `fmt` other than text2 (8 points only) through `driving.trajectory`."""
    v = rng.uniform(2, 12)
    curve = rng.uniform(-0.3, 0.3)
    s = v * 0.5 * np.arange(1, n_points + 1)
    if fmt != "text2":
        from wamdiff.driving.trajectory import format_trajectory  # noqa: PLC0415

        return format_trajectory(np.stack([s, curve * s * s / 10], 1), fmt)
    return ",".join(f"{a:.2f},{b:.2f}" for a, b in zip(s, curve * s * s / 10))


def write_dataset(directory: str | Path, *, n_train: int = 6, n_val: int = 4, n_qa: int = 4, seed: int = 0,
                  n_points: int = 8, fmt: str = "text2") -> dict[str, Path]:
    """DIR/train.json, val.json, train_qa.json, val_qa.json (+ DIR/images/*.png); returns their paths."""
    directory = Path(directory)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def driving(split: str, n: int) -> list[dict]:
        out = []
        for i in range(n):
            img = _image(rng, directory / "images" / f"{split}_{i}.png")
            cmd = ["left", "straight", "right"][i % 3]
            human = PROMPT.format(cmd=cmd, vx=rng.uniform(0, 12), vy=rng.uniform(-0.5, 0.5), ax=rng.uniform(-1, 1), ay=rng.uniform(-1, 1))
            out.append({"datasource": "synthetic", "id": f"{split}-{i}", "image": [img],
                        "conversations": [{"from": "human", "value": human},
                                          {"from": "gpt", "value": trajectory_text(rng, n_points, fmt)}]})
        return out

    def qa(split: str, n: int) -> list[dict]:
        out = []
        for i in range(n):
            img = _image(rng, directory / "images" / f"{split}_qa_{i}.png")
            q, a = QA[i % len(QA)]
            out.append({"datasource": "synthetic", "id": f"{split}-qa-{i}", "image": [img],
                        "conversations": [{"from": "human", "value": f"<image>\n{q}"}, {"from": "gpt", "value": a}]})
        return out

    files = {"train": driving("train", n_train), "val": driving("val", n_val), "train_qa": qa("train", n_qa), "val_qa": qa("val", n_qa)}
    paths = {}
    for name, rows in files.items():
        paths[name] = directory / f"{name}.json"
        paths[name].write_text(json.dumps(rows, indent=1))
    return paths
