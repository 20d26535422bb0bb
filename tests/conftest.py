"""Shared test settings: headless pygame, few threads, deterministic torch."""

import os

os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
# measured step-cost models and tuned dial curves of test runs stay out of the user's cache
os.environ["WAMDIFF_CACHE"] = os.path.join(__import__("tempfile").mkdtemp(prefix="wamdiff-test-cache-"))

import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every run (CI, `make test`, a plain pytest), so a failure is reproduced by
# running again. HYPOTHESIS_PROFILE=explore (or --hypothesis-profile explore) searches with fresh random examples.
settings.register_profile("repeatable", settings.get_profile("ci"))  # derandomize, no example database, print_blob
settings.register_profile("explore", settings.get_profile("default"), deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray (loopback, 2 CPUs) for the whole run, started by the first test that needs it; executors find
    it initialised and leave it running. Skipped where Ray (the optional extra `wamdiff[ray]`) is not installed."""
    pytest.importorskip("ray", reason="Ray is the optional extra: pip install 'wamdiff[ray]'")
    from wamdiff.executors import ExecutorConfig, init_ray

    ray, started = init_ray(ExecutorConfig("ray", 2))
    yield ray
    if started:
        ray.shutdown()
