"""Planner specs, parsed once into typed settings (`PlannerSpec`) before anything is planned.

Spec text: "expert" | "cv" | "reference" | "model:PATH[,key=value,...]" | "http://HOST:PORT[,batch=N]" (a planner
server, `wamdiff serve`; batch = requests sent at once per planning call). Model options: the decode settings
(`DecodeConfig` fields: mode, block_size, threshold, max_steps, strategy, max_new_tokens, delayed_cache, ...; or
their aliases block, steps, delayed, ordinal), over the checkpoint's recorded decode (`decoding.config.resolve_decode`), plus
  fmt=text2       answer format the text is parsed with (`driving.trajectory.FORMATS`; default: the one the
                  checkpoint recorded at training, else text2)
  batch=16        prompts decoded together
  fallback=cv     opt in: a failed plan is replaced by this planner's plan (cv or reference) and counted;
                  by default (none) a failed plan scores as a failure.
Every mistake (unknown key, bad value, fallback to a planner that is not one) raises a ValueError that names the
spec and the option; nothing is looked at again later, so nothing can fail half way through an evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wamdiff.decoding.config import DecodeConfig, resolve_decode
from wamdiff.driving.trajectory import FORMATS
from wamdiff.models.recorded import is_diffusion, recorded_answer_format, recorded_decode

PLANNER_KINDS = ("expert", "cv", "reference", "model", "http")
PLANNER_OPTIONS = ("fmt", "batch", "fallback")  # a model spec's options that are the planner's, not decode settings
FALLBACK_KINDS = ("cv", "reference")  # planners that can stand in for a failed plan (not the logged expert)
NO_FALLBACK = ("", "none", "off")


def split_options(spec: str, items: list[str]) -> dict[str, str]:
    """`key=value` items of a spec (after its path or stage name) as a dict of strings."""
    opts = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"planner spec {spec!r}: option {item!r} is not key=value")
        opts[key.strip()] = value.strip()
    return opts


@dataclass(frozen=True)
class PlannerSpec:
    """What to plan with. `text` is the spec as written (a planner's name in tables and file names)."""

    kind: str
    text: str
    checkpoint: Path | None = None  # model planners
    decode: DecodeConfig | None = None  # model planners
    fmt: str = "text2"
    batch: int = 16
    fallback: str | None = None  # a FALLBACK_KINDS planner, or None: failures score as failures
    url: str | None = None  # http planners: the server's base URL

    @property
    def learned(self) -> bool:
        """A model decodes the plans (in this process or behind a planner server)."""
        return self.kind in ("model", "http")

    @classmethod
    def parse(cls, text: str, free_text: bool = False) -> "PlannerSpec":
        """`free_text`: a model decodes free-text answers (driving QA), under its recorded free-text decode."""
        kind, _, rest = text.partition(":")
        if kind in ("http", "https"):
            return cls.http(text)
        if kind not in PLANNER_KINDS:
            raise ValueError(f"unknown planner spec {text!r}: use expert, cv, reference, model:PATH[,key=value...] "
                             "or http://HOST:PORT")
        if kind != "model":
            if rest:
                raise ValueError(f"planner spec {text!r}: only 'model:' takes arguments")
            return cls(kind, text)
        path, *items = rest.split(",")
        return cls.model(path, split_options(text, items), text=text, free_text=free_text)

    @classmethod
    def model(cls, checkpoint: str | Path, *layers: Mapping, text: str = "", free_text: bool = False) -> "PlannerSpec":
        """A model planner from its checkpoint and option layers, lowest first (e.g. a pipeline's `evaluate.decode`,
        then the spec's own options, then command-line flags; text or typed values): each layer's fmt / batch /
        fallback are the planner's, the rest decode settings (`resolve_decode`, over the checkpoint's recorded decode;
        `free_text`: its recorded free-text decode, `models.recorded.recorded_decode`)."""
        text = text or f"model:{checkpoint}"
        where = f"planner spec {text!r}"
        if not str(checkpoint):
            raise ValueError(f"{where}: missing checkpoint path")
        own: dict = {}
        decode_layers = []
        for layer in layers:
            layer = {k: v for k, v in layer.items() if v is not None}
            own.update({k: layer.pop(k) for k in PLANNER_OPTIONS if k in layer})
            decode_layers.append(layer)
        fmt = str(own.pop("fmt", None) or recorded_answer_format(checkpoint) or cls.fmt)
        if fmt not in FORMATS:
            raise ValueError(f"{where}: option fmt={fmt!r} is not one of {FORMATS}")
        batch, fallback = _batch_and_fallback(own, where)
        decode = resolve_decode(*decode_layers, recorded=recorded_decode(checkpoint, free_text),
                                diffusion=is_diffusion(checkpoint), where=where)
        return cls("model", text, Path(checkpoint), decode, fmt, batch, fallback)

    @classmethod
    def http(cls, text: str) -> "PlannerSpec":
        """A planner server's spec: "http://HOST:PORT[,batch=N,fallback=cv]"."""
        from urllib.parse import urlsplit

        url, *items = text.split(",")
        parts = urlsplit(url)
        where = f"planner spec {text!r}"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{where}: expected http://HOST:PORT (a `wamdiff serve` server)")
        try:
            parts.port  # noqa: B018 - raises for a port that is not a number
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        opts = split_options(text, items)
        unknown = sorted(set(opts) - {"batch", "fallback"})
        if unknown:
            raise ValueError(f"{where}: unknown option(s) {unknown} (an http planner takes batch= and fallback=)")
        batch, fallback = _batch_and_fallback(opts, where)
        return cls("http", text, batch=batch, fallback=fallback, url=url.rstrip("/"))


def _batch_and_fallback(opts: dict, where: str) -> tuple[int, str | None]:
    """The `batch=` and `fallback=` options, popped from `opts` and checked."""
    batch = opts.pop("batch", PlannerSpec.batch)
    try:
        batch = int(batch)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: option batch={batch!r} is not an integer") from None
    if batch < 1:
        raise ValueError(f"{where}: option batch={batch}: must be >= 1")
    fallback = str(opts.pop("fallback", "")).strip().lower()
    if fallback in NO_FALLBACK:
        fallback = None
    elif fallback not in FALLBACK_KINDS:
        raise ValueError(f"{where}: option fallback={fallback!r} is not one of {FALLBACK_KINDS} (or none)")
    return batch, fallback


def parse_specs(texts: list[str], free_text: bool = False) -> dict[str, PlannerSpec]:
    """Every spec of a command line, keyed by its text; all are checked before any is used. `free_text`: the
    models answer questions (`PlannerSpec.parse`)."""
    return {text: PlannerSpec.parse(text, free_text) for text in texts}
