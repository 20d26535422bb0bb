"""The WAM-Diff2 prompt and answer texts for a scene (docs/concepts/world.md, "The prompt"). Import these rather than rebuilding strings."""

from __future__ import annotations

from wamdiff.driving.scene import Scene
from wamdiff.driving.trajectory import format_trajectory

PROMPT_TEMPLATE = (
    "Here is a front-view images from a driving vehicle: <image>\n"
    "The navigation information is: {command}\n"
    "The current position is (0.00,0.00)\n"
    "The current velocity is: ({vx:.2f},{vy:.2f}) and current accelerate is: ({ax:.2f},{ay:.2f})\n"
    "Instruction: Based on the above information, predict the optimal driving action for the next 4 seconds "
    "with 8 new waypoints."
)


def _clean(v: float) -> float:
    return round(float(v), 2) + 0.0  # no "-0.00"


def scene_prompt(scene: Scene) -> str:
    """The human turn: one `<image>` placeholder, the route command and the ego state at t0 (ego frame)."""
    vx, vy, ax, ay = (_clean(v) for v in scene.ego_history[-1, 3:7])
    return PROMPT_TEMPLATE.format(command=scene.command, vx=vx, vy=vy, ax=ax, ay=ay)


def answer_text(scene: Scene, fmt: str = "text2") -> str:
    """The gpt turn: the expert's 8 future (x, y) in `fmt` (trajectory.py)."""
    return format_trajectory(scene.future[:, :2], fmt)
