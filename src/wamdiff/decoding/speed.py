"""The one definition of decoding speed, used by `wamdiff bench`, the evaluation front door and the reports.

Time counted: the `generate` call (prompt prefill, vision tower included, and every decode forward); prompt
encoding and answer parsing are not. A batch of n prompts is decoded together; then

- latency_ms   = wall time of one batch: how long a trajectory takes to come back (at batch 1: ms per trajectory);
- plans_per_s  = trajectories / wall time (throughput at that batch size);
- tok_s        = generated tokens (EOS included, nothing after it) / wall time;
- tpf          = generated tokens / forwards, per trajectory (forwards count the prefill and commits).

"× AR" everywhere = plans/s of a setting / plans/s of the AR baseline at the same batch size in the same run
(equal to AR's latency / the setting's latency); the batch size is always stated next to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Speed:
    batch: int  # prompts decoded together
    plans: int  # trajectories decoded
    tokens: int  # generated tokens over all of them
    forwards: int  # forwards over all of them (each sample counts the forwards it took part in)
    wall_s: float  # decoding wall time over all batches

    @property
    def batches(self) -> int:
        return -(-self.plans // self.batch)

    @property
    def latency_ms(self) -> float:
        return 1e3 * self.wall_s / max(1, self.batches)

    @property
    def plans_per_s(self) -> float:
        return self.plans / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def tpf(self) -> float:
        return self.tokens / self.forwards if self.forwards else float("nan")

    def as_dict(self) -> dict:
        return {**asdict(self), "latency_ms": self.latency_ms, "plans_per_s": self.plans_per_s, "tok_s": self.tok_s,
                "ms_per_token": 1e3 * self.wall_s / max(1, self.tokens), "tpf": self.tpf,
                "tokens_per_plan": self.tokens / max(1, self.plans), "forwards_per_plan": self.forwards / max(1, self.plans)}


def speed_of(gens, wall_s: float, batch: int) -> Speed:
    """Speed of `generate` outputs (`Generation`s) decoded in batches of `batch` within `wall_s` seconds."""
    return Speed(batch, len(gens), sum(len(g.token_ids) for g in gens), sum(g.forwards for g in gens), wall_s)


def times_ar(speed: dict | None, ar: dict | None) -> float | None:
    """The "× AR" figure of two `Speed.as_dict()` results at the same batch size (None when either is missing)."""
    if not speed or not ar or not ar.get("plans_per_s") or speed.get("plans_per_s") is None:
        return None
    if speed.get("batch") != ar.get("batch"):
        raise ValueError(f"× AR compares the same batch size, got {speed.get('batch')} vs {ar.get('batch')}")
    return speed["plans_per_s"] / ar["plans_per_s"]


def median_speed(runs: list[Speed]) -> Speed:
    """Repeats of one measurement: the run with the median wall time."""
    return sorted(runs, key=lambda s: s.wall_s)[(len(runs) - 1) // 2] if runs else None
