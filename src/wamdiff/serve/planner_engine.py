"""What the server plans with: a checkpoint behind `eval.planners.ModelPlanner` (the in-process planner's own
code path: the same prompt, encoding, decoding and parsing, so a request plans exactly as the scene it came from).

`ServeSettings` are the server's typed settings; `PlannerEngine(settings)` loads the checkpoint, resolves the mode
(the model's own unless `--mode` says otherwise), and decodes one blank request to warm up, so a checkpoint that
cannot decode in the asked mode fails at start (one line, exit 2) instead of on the first request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wamdiff.errors import UserError
from wamdiff.eval.wire import PlanInput

SERVER_VERSION = "wamdiff-serve/0.1"


@dataclass(frozen=True)
class ServeSettings:
    checkpoint: Path
    mode: str | None = None  # "ar" | "block" | None: block for a diffusion checkpoint, else ar
    fmt: str | None = None  # answer format; None: the one the checkpoint recorded (`eval.specs.recorded_answer_format`)
    decode: dict = field(default_factory=dict)  # more decode options (`DecodeConfig.from_options` names)
    max_batch: int = 8
    max_wait_ms: float = 5.0
    threads: int | None = None  # torch intra-op threads (None: torch's default)


class PlannerEngine:
    def __init__(self, settings: ServeSettings):
        import numpy as np

        from wamdiff.eval.planners import ModelPlanner
        from wamdiff.eval.specs import PlannerSpec

        self.settings = settings
        if settings.threads:
            import torch

            torch.set_num_threads(int(settings.threads))
        if settings.mode not in (None, "ar", "block"):
            raise UserError(f"--mode {settings.mode!r}: use ar or block")
        options = {**settings.decode, "batch": settings.max_batch, **({"fmt": settings.fmt} if settings.fmt else {}),
                   **({"mode": settings.mode} if settings.mode else {})}  # no --mode: the checkpoint's own
        spec = PlannerSpec.model(settings.checkpoint, options, text=f"model:{settings.checkpoint}")
        try:
            self.planner = ModelPlanner(spec)
        except ValueError as err:
            raise UserError(f"--checkpoint {settings.checkpoint}: {err}") from None
        self.planner.prepare()
        self.block_size = self._block_size()
        if settings.mode == "block" and self.block_size is None:
            raise UserError(f"--mode block: {settings.checkpoint} has no diffusion settings (an AR checkpoint); "
                            "serve it with --mode ar or convert it with `wamdiff model convert`")
        self.camera = self.planner.camera
        blank = PlanInput(np.zeros((self.camera.size, self.camera.size, 3), np.uint8), "straight", (10.0, 0.0), (0.0, 0.0))
        try:
            self.plan([blank])  # warm-up; also proves the checkpoint decodes in this mode
        except ValueError as err:
            raise UserError(f"--checkpoint {settings.checkpoint}: cannot decode it ({err})") from None

    def _block_size(self) -> int | None:
        from wamdiff.models import diffusion_settings

        try:
            native = diffusion_settings(self.planner.model).block_size
        except ValueError:
            return None
        return self.planner.spec.decode.block_size or native

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
            "max_steps_per_block": decode.max_steps_per_block if block else None,
            "strategy": decode.strategy if block else None,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "format": self.planner.spec.fmt,
            "max_new_tokens": decode.max_new_tokens, "camera": self.camera.to_dict(),
            "batching": {"max_batch": self.settings.max_batch, "max_wait_ms": self.settings.max_wait_ms},
            "threads": torch.get_num_threads(),
        }
