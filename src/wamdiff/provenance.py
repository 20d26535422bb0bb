"""What a result was produced with: commit, Python, torch, threads, machine (recorded next to every report)."""

from __future__ import annotations

import os
import platform
import subprocess


def provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    import torch

    return {"commit": commit, "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "cpus": os.cpu_count()}
