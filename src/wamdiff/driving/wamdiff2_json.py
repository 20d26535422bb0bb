"""Read and write the WAM-Diff2 training files (LLaVA-style conversations), ours or NAVSIM-derived ones.

One sample: {"id": str, "image": str | [str, ...] (optional), "conversations": [{"from": "human", "value":
"...<image>..."}, {"from": "gpt", "value": "x1,y1,..."}], ...any other keys}. A file is a JSON list (`.json`)
or one object per line (`.jsonl`). Image paths are resolved against `image_root` (default: the file's folder)
and returned absolute. Extra keys go to `meta`; extra conversation turns go to `meta["extra_turns"]`.
Errors name the file, the line (and column for JSON syntax) and what is wrong: `ValueError`.

A sample's prompt has one encoding (`encode_sample_prompt`: its human turn with its images, however many cameras,
through the model's chat template): training (`training.data.encode_sample`), `wamdiff eval openloop --data` and
`wamdiff bench --data` (`driving.bench_inputs`) all come here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from wamdiff.atomic import write_atomically


@dataclass
class ConversationSample:
    id: str
    image_paths: list[str]  # absolute
    human: str
    answer: str
    meta: dict = field(default_factory=dict)
    where: str = field(default="", compare=False)  # "file:line (item k)" it was read from, for error messages


def _sample_from_obj(obj, where: str, root: Path) -> ConversationSample:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise ValueError(f"{where}: missing or empty 'conversations' list")
    human = answer = None
    extra = []
    for k, turn in enumerate(conv):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise ValueError(f"{where}: conversations[{k}] needs 'from' and 'value'")
        if not isinstance(turn["value"], str):
            raise ValueError(f"{where}: conversations[{k}].value is not a string")
        role = str(turn["from"]).lower()
        if human is None and role in ("human", "user"):
            human = turn["value"]
        elif human is not None and answer is None and role in ("gpt", "assistant"):
            answer = turn["value"]
        else:
            extra.append(turn)
    if human is None or answer is None:
        raise ValueError(f"{where}: needs a 'human' turn followed by a 'gpt' turn")
    images = obj.get("image", [])
    if images is None:
        images = []
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise ValueError(f"{where}: 'image' must be a string or a list of strings")
    paths = [str(Path(p) if os.path.isabs(p) else (root / p).resolve()) for p in images]
    meta = {k: v for k, v in obj.items() if k not in ("id", "image", "conversations")}
    if extra:
        meta["extra_turns"] = extra
    sid = obj.get("id")
    return ConversationSample(id=str(sid) if sid is not None else where, image_paths=paths, human=human, answer=answer, meta=meta,
                              where=where)


def read_samples(path: str | Path, image_root: str | Path | None = None) -> list[ConversationSample]:
    path = Path(path)
    root = Path(image_root) if image_root is not None else path.parent.resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read ({err})") from err
    samples = []
    if path.suffix == ".jsonl":
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: invalid JSON at column {err.colno} ({err.msg})") from err
            samples.append(_sample_from_obj(obj, f"{path}:{lineno}", root))
        return samples
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: invalid JSON at column {err.colno} ({err.msg})") from err
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of samples, got {type(data).__name__}")
    lines = _item_lines(text) if len(data) else []
    for k, obj in enumerate(data):
        line = f":{lines[k]}" if k < len(lines) else ""
        samples.append(_sample_from_obj(obj, f"{path}{line} (item {k})", root))
    return samples


def _item_lines(text: str) -> list[int]:
    """Line number where each top-level list item starts (for error messages), by a light scan of the text."""
    lines, depth, in_str, esc, line = [], 0, False, False, 1
    for ch in text:
        if ch == "\n":
            line += 1
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            if depth == 1:
                lines.append(line)
            depth += 1
        elif ch in "]}":
            depth -= 1
    return lines


def sample_to_obj(s: ConversationSample, relative_to: Path | None = None) -> dict:
    images = []
    for p in s.image_paths:
        if relative_to is not None:
            try:
                p = os.path.relpath(p, relative_to)
            except ValueError:
                pass
        images.append(p)
    obj = {"id": s.id, "image": images,
           "conversations": [{"from": "human", "value": s.human}, {"from": "gpt", "value": s.answer}]}
    obj.update({k: v for k, v in s.meta.items() if k not in obj})
    return obj


def write_samples(samples: list[ConversationSample], path: str | Path, relative_images: bool = True) -> Path:
    """Write a `.json` list or a `.jsonl` file (by suffix), image paths relative to the file's folder. Atomic."""
    path = Path(path)
    rel = path.parent.resolve() if relative_images else None
    objs = [sample_to_obj(s, rel) for s in samples]

    def write(f) -> None:
        if path.suffix == ".jsonl":
            for o in objs:
                f.write(json.dumps(o, ensure_ascii=False) + "\n")
        else:
            json.dump(objs, f, ensure_ascii=False, indent=1)

    return write_atomically(path, write, text=True)


def sample_images(s: ConversationSample, json_path: str | Path = "") -> list:
    """The RGB images of a sample, in its order; a missing, unreadable or non-image file is a UserError naming the
    file, the sample and the field."""
    from PIL import Image

    from wamdiff.errors import UserError

    images = []
    for ip in s.image_paths:
        try:
            with Image.open(ip) as im:
                images.append(im.convert("RGB"))
        except OSError as err:  # missing, unreadable or not an image (PIL's UnidentifiedImageError)
            raise UserError(f"{s.where or json_path}: sample {s.id!r}: field 'image': cannot open {ip} "
                            f"({err.strerror or type(err).__name__}); fix the path (relative paths resolve "
                            "against the JSON file's folder, or data.image_root) or regenerate the data") from err
    return images


def encode_sample_prompt(s: ConversationSample, tokenizer, *, vision: bool, image_processor=None,
                         json_path: str | Path = ""):
    """The one encoding of a sample's prompt (`models.processor.EncodedPrompt`): its human turn with its images
    through the tokenizer's chat template (`models.processor.encode_prompt`; vision=False: text only, images not
    read). A placeholder count that differs from the image count, or a template that does not render: a
    ValueError naming the file and the sample."""
    from wamdiff.models.processor import encode_prompt

    images = sample_images(s, json_path) if vision else []
    try:
        return encode_prompt(tokenizer, s.human, images, vision=vision, image_processor=image_processor)
    except ValueError as err:
        raise ValueError(f"{s.where or json_path}: sample {s.id!r}: {err}") from None
