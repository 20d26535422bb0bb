"""The sha256 of weight files: recorded when a model is saved or exported, checked when it loads and by
`wamdiff model verify`; a checkpoint whose weight bytes were randomised under an intact header is refused in one
line instead of loading and planning badly. The expected digests are computed here with hashlib on the bytes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_reliability_errors import assert_user_error, cli

from wamdiff.errors import UserError
from wamdiff.models import build_model, load_model, save_model
from wamdiff.models.checksums import SUMS_FILE, read_checksums, verify_checksums
from wamdiff.models.tokenizer import build_tokenizer

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tok = build_tokenizer()
    return save_model(build_model("tiny", tok, seed=0), tok, tmp_path_factory.mktemp("ckpt") / "tiny")


def randomise_weights(path: Path, seed: int = 0) -> None:
    """Overwrite every tensor byte of a safetensors file with random bytes; the header (shapes, dtypes) stays."""
    raw = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    raw[start:] = np.random.default_rng(seed).integers(0, 256, len(raw) - start, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))


def test_save_model_records_the_sha256_of_its_weights_in_sha256sum_format(saved):
    weights = saved / "model.safetensors"
    assert (saved / SUMS_FILE).read_text() == f"{digest(weights)}  model.safetensors\n"
    assert verify_checksums(saved) == {"model.safetensors": digest(weights)}


def test_weights_randomised_under_an_intact_header_are_refused_at_load(saved, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(saved, broken)
    weights = broken / "model.safetensors"
    randomise_weights(weights)
    with pytest.raises(UserError, match="does not match") as err:
        load_model(broken)
    assert str(weights) in str(err.value) and "\n" not in str(err.value)
    assert_user_error(cli("model", "info", broken), str(weights), "does not match", "recorded in SHA256SUMS")
    assert_user_error(cli("model", "verify", broken), str(weights), "does not match")
    (broken / SUMS_FILE).unlink()  # without the record the same file loads silently: the check is what caught it
    load_model(broken)


def test_model_verify_and_record(saved, tmp_path):
    res = cli("model", "verify", saved)
    assert res.exit_code == 0 and "1 weight file(s) match" in res.stdout
    bare = tmp_path / "bare"
    shutil.copytree(saved, bare)
    (bare / SUMS_FILE).unlink()
    assert_user_error(cli("model", "verify", bare), "no SHA256SUMS", "--record")
    recorded = cli("model", "verify", bare, "--record")
    assert recorded.exit_code == 0 and digest(bare / "model.safetensors") in recorded.stdout
    assert read_checksums(bare) == {"model.safetensors": digest(bare / "model.safetensors")}
    (bare / "extra.safetensors").write_bytes(b"x")
    assert_user_error(cli("model", "verify", bare), "extra.safetensors", "not recorded")
    (bare / "extra.safetensors").unlink()
    (bare / "model.safetensors").rename(bare / "gone")
    assert_user_error(cli("model", "verify", bare), "model.safetensors", "missing")


@pytest.mark.parametrize("text", ["not a sum\n", "abc  model.safetensors\n", f"{'0' * 64}  ../model.safetensors\n"])
def test_a_malformed_record_is_named_with_its_line(saved, tmp_path, text):
    odd = tmp_path / "odd"
    shutil.copytree(saved, odd)
    (odd / SUMS_FILE).write_text(f"{digest(odd / 'model.safetensors')}  model.safetensors\n" + text)
    with pytest.raises(UserError, match=f"{SUMS_FILE}:2: not a"):
        read_checksums(odd)


@pytest.mark.parametrize("name", ["ar_vla", "distill_block", "main/sh_qa2", "small/small_student_dagger4"])
def test_shipped_checkpoints_carry_the_sha256_of_their_weights(name):
    """Each shipped folder's SHA256SUMS and its stage in the PROVENANCE.json beside it name exactly the bytes of its
    weights."""
    folder = CHECKPOINTS / name
    expected = {f.name: digest(f) for f in sorted(folder.glob("*.safetensors"))}
    assert expected and read_checksums(folder) == expected
    provenance = json.loads((folder.parent / "PROVENANCE.json").read_text())
    assert provenance["stages"][folder.name]["weights_sha256"] == expected
    res = cli("model", "verify", folder)
    assert res.exit_code == 0 and "PROVENANCE.json" in res.stdout


def test_verify_also_checks_the_exported_provenance(saved, tmp_path):
    ship = tmp_path / "ship"
    shutil.copytree(saved, ship / "student")
    (ship / "PROVENANCE.json").write_text(json.dumps({"stages": {"student": {"weights_sha256": {"model.safetensors": "0" * 64}}}}))
    assert_user_error(cli("model", "verify", ship / "student"), "does not match", "PROVENANCE.json")
