"""Shared test settings: headless pygame, few threads, deterministic torch."""

import os

os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
# measured step-cost models and tuned dial curves of test runs stay out of the user's cache
os.environ["WAMDIFF_CACHE"] = os.path.join(__import__("tempfile").mkdtemp(prefix="wamdiff-test-cache-"))

import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
