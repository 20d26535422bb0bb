"""The wheel, as a user installs it (slow: `make test-slow`): built from the repository, installed into a fresh
venv outside it, and run from a directory that holds no repository files — a small evaluation (the constant-velocity
planner and the shipped AR VLA on 2 generated scenes) and an export of a shipped checkpoint through the packaged
demo config with WAMDIFF_CHECKPOINTS.

The fresh venv takes wamdiff from the wheel and nothing else from the repository; its dependencies come from the
running environment's site-packages (a .pth line), so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd, cwd, env=None):
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_repository(tmp_path):
    wheels, venv, work = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT], cwd=tmp_path)
    wheel = next(wheels.glob("wamdiff-*.whl"))
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    py = venv / "bin" / "python"
    fresh = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work).strip())
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]  # torch, transformers, ...: not wamdiff's sources
    (fresh / "zz_deps.pth").write_text("\n".join(deps) + "\n")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel], cwd=tmp_path)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_DISABLE_PROGRESS_BARS="1", SDL_VIDEODRIVER="offscreen",
               WAMDIFF_CHECKPOINTS=str(ROOT / "checkpoints"))
    where = _run([py, "-c", "import wamdiff; print(wamdiff.__file__)"], cwd=work, env=env).strip()
    assert Path(where).is_relative_to(venv), where  # the installed wheel, not the repository's src/
    wamdiff = venv / "bin" / "wamdiff"

    _run([wamdiff, "data", "generate", "--family", "highway", "--split", "test", "--n", "2", "--fmt", "delta",
          "--workers", "1", "--out", "data"], cwd=work, env=env)
    _run([wamdiff, "eval", "pdms", "--planner", "cv", "--planner", f"model:{ROOT / 'checkpoints' / 'ar_vla'}",
          "--data", "data", "--limit", "2", "--plots", "0", "--out", "eval"], cwd=work, env=env)
    summary = json.loads((work / "eval" / "pdms_summary.json").read_text())
    assert len(summary["planners"]) == 2

    # the demo config from the package, its checkpoints from WAMDIFF_CHECKPOINTS
    _run([wamdiff, "pipeline", "--config", "configs/demo.yaml", "--export", "ship", "--stages", "ar_vla"], cwd=work, env=env)
    assert (work / "ship" / "ar_vla" / "config.json").is_file() and (work / "ship" / "ar_vla" / "README.md").is_file()
    assert not (work / "configs").exists() and not (work / "checkpoints").exists()
