"""What the server plans with: a checkpoint behind `eval.planners.ModelPlanner` (the in-process planner's own
code path: the same prompt, encoding, decoding and parsing, so a request plans exactly as the scene it came from).

A request carries one camera image per `<image>` placeholder of the checkpoint's prompt (`driving.prompts.
prompt_template`: the prompt it records as `wamdiff_prompt`, else the world's one-camera prompt): `n_images`, in
`GET /info`.

`ServeSettings` are the server's typed settings: the planner spec (checkpoint, decode settings resolved once by
`decoding.config.resolve_decode`, answer format, batch) and the batching; `PlannerEngine(settings)` loads the
checkpoint and decodes one blank request to warm up, so a checkpoint that cannot decode in the asked mode fails at
start (one line, exit 2) instead of on the first request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wamdiff.errors import UserError
from wamdiff.eval.wire import PlanInput

if TYPE_CHECKING:
    from wamdiff.eval.specs import PlannerSpec

SERVER_VERSION = "wamdiff-serve/0.1"


@dataclass(frozen=True)
class ServeSettings:
    spec: PlannerSpec  # a model planner: the checkpoint, its decode, answer format and batch (= --max-batch)
    max_wait_ms: float = 5.0
    threads: int | None = None  # torch intra-op threads (None: torch's default)

    @property
    def checkpoint(self):
        return self.spec.checkpoint

    @property
    def max_batch(self) -> int:
        return self.spec.batch


class PlannerEngine:
    def __init__(self, settings: ServeSettings):
        import numpy as np

        from wamdiff.eval.planners import ModelPlanner

        self.settings = settings
        if settings.threads:
            import torch

            torch.set_num_threads(int(settings.threads))
        try:  # loads the checkpoint and checks its recorded prompt
            self.planner = ModelPlanner(settings.spec)
            self.planner.prepare()
        except ValueError as err:
            raise UserError(f"--checkpoint {settings.checkpoint}: {err}") from None
        self.block_size = self._block_size()
        if self.mode == "block" and self.block_size is None:
            raise UserError(f"--mode block: {settings.checkpoint} has no diffusion settings (an AR checkpoint); "
                            "serve it with --mode ar or convert it with `wamdiff model convert`")
        self.camera = self.planner.camera
        self.n_images = self.planner.n_images  # cameras per request: one per <image> of the checkpoint's prompt
        image = np.zeros((self.camera.size, self.camera.size, 3), np.uint8)
        blank = PlanInput(image, "straight", (10.0, 0.0), (0.0, 0.0), more_images=(image,) * (self.n_images - 1))
        try:
            self.plan([blank])  # warm-up; also proves the checkpoint decodes in this mode
        except ValueError as err:
            raise UserError(f"--checkpoint {settings.checkpoint}: cannot decode it ({err})") from None

    def _block_size(self) -> int | str | None:
        """The block size a block decode uses (the spec's, else the trained one); None for an AR checkpoint."""
        from wamdiff.models import diffusion_settings, is_diffusion

        if not is_diffusion(self.planner.model):
            return None
        return self.planner.spec.decode.block_size or diffusion_settings(self.planner.model).block_size

    @property
    def mode(self) -> str:
        return self.planner.spec.decode.mode

    @property
    def image_size(self) -> int:
        return self.camera.size

    def plan(self, inputs: list[PlanInput]) -> list:
        """Plans (`eval.planners.Plan`) for a batch of requests; raises when the model fails."""
        return self.planner.plan(inputs)

    def info(self) -> dict:
        import torch

        from wamdiff.models import count_parameters

        model, decode = self.planner.model, self.planner.spec.decode
        block = self.mode == "block"
        return {
            "version": SERVER_VERSION,
            "model": {"checkpoint": str(self.settings.checkpoint), "class": type(model).__name__,
                      "preset": getattr(model.config, "preset", None), "parameters": count_parameters(model).get("total")},
            "mode": self.mode, "block_size": self.block_size if block else None,
            "threshold": decode.threshold if block else None,
            "max_steps": decode.max_steps if block else None,
            "strategy": decode.strategy if block else None,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "format": self.planner.spec.fmt,
            "max_new_tokens": decode.max_new_tokens, "camera": self.camera.to_dict(), "n_images": self.n_images,
            "batching": {"max_batch": self.settings.max_batch, "max_wait_ms": self.settings.max_wait_ms},
            "threads": torch.get_num_threads(),
        }
