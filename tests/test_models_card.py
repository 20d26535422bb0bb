"""Model cards (`README.md` with Hugging Face front matter) written by `model convert` and the pipeline's export:
settings read back from the checkpoint, the measured table only from the export's summary, and the card's one-line
load giving the model with its block-causal attention (a plain from_pretrained does not)."""

from __future__ import annotations

import json
import os

import yaml
from typer.testing import CliRunner

from wamdiff.models import build_model, build_tokenizer, save_model
from wamdiff.models.card import ONE_LINE_LOAD, front_matter
from wamdiff.models.cli import app


def test_convert_writes_a_card_inheriting_base_model_and_license_and_its_load_line_works(tmp_path):
    from transformers import AutoModelForCausalLM

    from wamdiff.diffusion.attention import ATTN_IMPL
    from wamdiff.diffusion.attention import text_config

    tok = build_tokenizer()
    src = save_model(build_model("tiny", tok, vision=False, seed=0), tok, tmp_path / "ar")
    (src / "README.md").write_text("---\nlicense: apache-2.0\nbase_model: Qwen/Qwen3-VL-2B-Instruct\n---\n# mine\n")
    res = CliRunner().invoke(app, ["convert", str(src), "--block-size", "8", "--out", str(tmp_path / "b8")])
    assert res.exit_code == 0, res.output
    meta = front_matter(tmp_path / "b8")
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert "wamdiff" in meta["tags"] and meta["library_name"] == "transformers"
    text = (tmp_path / "b8" / "README.md").read_text()
    assert "| block size | 8 |" in text and "## Measured" not in text  # a fresh conversion was never measured

    scope = {}
    exec(ONE_LINE_LOAD.format(path=tmp_path / "b8"), scope)  # the card's documented line, as a user runs it
    assert scope["model"].config.diffusion["block_size"] == 8
    assert text_config(scope["model"])._attn_implementation == ATTN_IMPL
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "b8")
    assert text_config(plain)._attn_implementation != ATTN_IMPL  # why the card says to use load_model

    res = CliRunner().invoke(app, ["convert", str(tmp_path / "b8"), "--block-size", "4", "--license", "mit",
                                   "--base-model", "me/my-vla", "--out", str(tmp_path / "b4")])
    assert res.exit_code == 0, res.output
    assert front_matter(tmp_path / "b4") == {**meta, "license": "mit", "base_model": "me/my-vla"}


def test_a_model_without_a_card_converts_under_license_other(tmp_path):
    tok = build_tokenizer()
    src = save_model(build_model("tiny", tok, vision=False, seed=0), tok, tmp_path / "ar")
    assert CliRunner().invoke(app, ["convert", str(src), "--block-size", "4", "--out", str(tmp_path / "b4")]).exit_code == 0
    meta = front_matter(tmp_path / "b4")
    assert meta["license"] == "other" and "base_model" not in meta


def test_export_cards_carry_the_measured_table_of_the_shipped_summary_only(tmp_path):
    from wamdiff.models import to_diffusion
    from wamdiff.orchestration.pipeline import export_checkpoints

    tok = build_tokenizer()
    student = save_model(to_diffusion(build_model("tiny", tok, seed=0), 16, tokenizer=tok), tok, tmp_path / "student")
    out = tmp_path / "run"
    (out / "stages").mkdir(parents=True)
    (out / "report").mkdir()
    stage_file, summary = out / "stages" / "student.json", out / "report" / "summary.csv"
    stage_file.write_text("{}")
    summary.write_text("planner,spec,pdms,l2_4s\nexpert,expert,94.1,0.0\nAR,stage:ar,91.25,1.5\n"
                       "the student,stage:student,92.125,1.25\n")
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"out": str(out), "data": {"fmt": "delta"}, "checkpoints": {"student": str(student)}}))
    os.utime(summary, (1e9, 2e9))
    os.utime(stage_file, (1e9, 1e9))
    dest = export_checkpoints(config, tmp_path / "ship", ["student"])
    card = (dest / "student" / "README.md").read_text()
    assert front_matter(dest / "student")["license"] == "mit"
    assert "| block size | 16 |" in card
    table = [line for line in card.splitlines() if line.startswith("| ") and "PDMS" not in line and "setting" not in line]
    assert "| **the student** (this model) | 92.12 | 1.25 |" in table and "| AR | 91.25 | 1.50 |" in table
    assert not any("expert" in line for line in table)  # model rows only
    assert json.loads((dest / "PROVENANCE.json").read_text())["commit"] in card

    os.utime(stage_file, (1e9, 3e9))  # a report older than the stage: no table, and so no figures in the card
    export_checkpoints(config, dest, ["student"])
    assert "## Measured" not in (dest / "student" / "README.md").read_text()


def test_card_command_takes_its_table_from_a_front_csv_and_keeps_the_cards_license(tmp_path, capsys):
    from wamdiff.models import to_diffusion

    tok = build_tokenizer()
    small = save_model(to_diffusion(build_model("tiny", tok, seed=0), 16, tokenizer=tok), tok, tmp_path / "small")
    (small / "README.md").write_text("---\nlicense: apache-2.0\nbase_model: me/my-vla\n---\n# old\n")
    front = tmp_path / "front.csv"
    front.write_text("planner,spec,pdms,d_pdms,pdms_ci,c,l2_4s,plans_s_b1,x_ar_b1\n"
                     "ar_vla,\"model:ckpt/ar_vla,mode=ar\",92.375,,,0.99125,2.5,6.5,1.0\n"
                     "small,\"model:ckpt/small,block=17\",92.0625,-0.3125,0.75,0.98875,2.25,45.5,7.0\n"
                     "expert,expert,94.0,1.625,1.0,1.0,0.0,,\n")
    res = CliRunner().invoke(app, ["card", str(small), "--measured", str(front), "--measured-from", "Paired, 1,600 scenes."])
    assert res.exit_code == 0, res.output
    card = (small / "README.md").read_text()
    meta = front_matter(small)
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "me/my-vla"  # kept from the card it replaces
    assert "Paired, 1,600 scenes." in card and "| block size | 16 |" in card
    measured = card.split("## Measured")[1].split("## License")[0]
    table = [line for line in measured.splitlines() if line.startswith("| ")]
    assert table[0] == "| model | PDMS | Δ PDMS (paired) | Δ PDMS ±95 % | comfort | L2 @4 s (m) | plans/s B1 | × AR B1 |"
    assert table[1:] == ["| **small** (this model) | 92.06 | -0.31 | 0.75 | 0.99 | 2.25 | 45.50 | 7.00 |",
                         "| ar_vla | 92.38 |  |  | 0.99 | 2.50 | 6.50 | 1.00 |"]  # model rows only, this one first

    from wamdiff.cli import main

    capsys.readouterr()  # the save's progress bars
    assert main(["model", "card", str(small), "--measured", str(front), "--row", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no model row named 'nope'" in err and len(err.splitlines()) == 1
