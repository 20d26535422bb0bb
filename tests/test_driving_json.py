"""WAM-Diff2 JSON I/O: round trips, foreign files, and errors that name file and line."""

import json

import pytest

from wamdiff.driving.wamdiff2_json import ConversationSample, read_samples, write_samples


def _obj(i, image=...):
    o = {"id": f"s{i}", "conversations": [{"from": "human", "value": "look <image>"}, {"from": "gpt", "value": "1.00,2.00"}]}
    if image is not ...:
        o["image"] = image
    return o


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_round_trip(tmp_path, suffix):
    img = tmp_path / "imgs" / "a.png"
    samples = [ConversationSample("a", [str(img)], "h <image>", "ans", {"family": "merge"}),
               ConversationSample("b", [], "h2", "ans2", {})]
    path = write_samples(samples, tmp_path / f"out{suffix}")
    back = read_samples(path)
    assert [s.id for s in back] == ["a", "b"]
    assert back[0].image_paths == [str(img.resolve())]
    assert back[0].meta["family"] == "merge" and back[1].image_paths == []
    assert back[0].human == "h <image>" and back[0].answer == "ans"


def test_reads_foreign_navsim_style_file(tmp_path):
    data = [_obj(0, "cam/front.jpg") | {"token": "abc", "score": 0.5}, _obj(1, ["/abs/x.jpg", "y.jpg"]), _obj(2)]
    data[2]["conversations"].append({"from": "human", "value": "more?"})
    (tmp_path / "d.json").write_text(json.dumps(data))
    s = read_samples(tmp_path / "d.json")
    assert s[0].image_paths == [str((tmp_path / "cam/front.jpg").resolve())]
    assert s[0].meta == {"token": "abc", "score": 0.5}
    assert s[1].image_paths == ["/abs/x.jpg", str((tmp_path / "y.jpg").resolve())]
    assert s[2].image_paths == [] and s[2].meta["extra_turns"][0]["value"] == "more?"


def test_corrupt_jsonl_line_names_file_and_line(tmp_path):
    lines = [json.dumps(_obj(0)), json.dumps(_obj(1)), '{"id": "s2", "conversations": [', json.dumps(_obj(3))]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: invalid JSON"):
        read_samples(path)


def test_corrupt_json_file_names_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n {"id": "a",\n  "conversations": [}\n]\n')
    with pytest.raises(ValueError, match=r"bad\.json:3: invalid JSON"):
        read_samples(path)


def test_bad_sample_names_item_and_line(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([_obj(0), {"id": "x", "conversations": [{"from": "gpt", "value": "only"}]}], indent=1))
    with pytest.raises(ValueError, match=r"d\.json:\d+ \(item 1\): needs a 'human' turn"):
        read_samples(path)
    path.write_text(json.dumps([_obj(0, 5)]))
    with pytest.raises(ValueError, match="'image' must be"):
        read_samples(path)
