"""The WAM-Diff2 prompt and answer texts for a scene (docs/concepts/world.md, "The prompt"). Import these rather than rebuilding strings."""

from __future__ import annotations

from wamdiff.driving.scene import Scene
from wamdiff.driving.trajectory import format_trajectory
from wamdiff.models.tokens import IMAGE_PLACEHOLDER  # one per camera image

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


def scene_prompt(scene: Scene, template: str = PROMPT_TEMPLATE) -> str:
    """The human turn: the route command and the ego state at t0 (ego frame) in `template` (default: the world's
    prompt, one `<image>` placeholder; a checkpoint may record its own, `prompt_template`)."""
    vx, vy, ax, ay = (_clean(v) for v in scene.ego_history[-1, 3:7])
    return template.format(command=scene.command, vx=vx, vy=vy, ax=ax, ay=ay)


def image_count(template: str = PROMPT_TEMPLATE) -> int:
    """How many camera images a prompt takes: its `<image>` placeholders."""
    return template.count(IMAGE_PLACEHOLDER)


def prompt_template(source) -> str:
    """The served prompt template of a checkpoint (a folder, a loaded model or its config): the one it records
    (`wamdiff_prompt` in config.json, `models.recorded.recorded_prompt`), else `PROMPT_TEMPLATE`. A recorded one
    that does not format (an unknown {field}, a stray brace) or has no `<image>` is a ValueError naming the key."""
    from wamdiff.models.recorded import recorded_prompt

    template = recorded_prompt(source)
    if template is None:
        return PROMPT_TEMPLATE
    try:
        template.format(command="straight", vx=0.0, vy=0.0, ax=0.0, ay=0.0)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"config.json wamdiff_prompt: does not format ({type(err).__name__}: {err}); it may use "
                         "{command}, {vx}, {vy}, {ax}, {ay} (a literal brace doubled)") from None
    if not image_count(template):
        raise ValueError(f"config.json wamdiff_prompt: no {IMAGE_PLACEHOLDER} placeholder (one per camera)")
    return template


def answer_text(scene: Scene, fmt: str = "text2") -> str:
    """The gpt turn: the expert's 8 future (x, y) in `fmt` (trajectory.py)."""
    return format_trajectory(scene.future[:, :2], fmt)
