"""How a Chatterbox stream cuts its S3Gen work (`StreamChunking`; its sizes by name:
`ChunkKnobs`), without torch: the backends' knob defaults. Beside it, what a listener hears of
a schedule (`chunk_timeline`, `stall_s`): the condition the default ramp was chosen by."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..contract import knob
from .config import LOOKAHEAD

TOKEN_SECONDS = 0.04  # audio per speech token: 2 mel frames of 480 samples at 24 kHz


@dataclass(frozen=True)
class StreamChunking:
    """How a stream cuts S3Gen's work. Defaults from benchmarks/chatterbox_stream_bench.py: a
    pass bounded to the prompt's last 25 tokens and 10 of left context costs ~90 tokens of flow
    work, not prompt (<= 250) + every token, within 38.9-48.6 dB of the whole pass (tiny). The
    first chunk holds first_tokens - holdback - hift_right / 2 tokens (200 ms: a 250 ms player
    starts at the second); the ramp (`next_pass`) is chosen by `stall_s`."""

    first_tokens: int = 12  # speech tokens before the first S3Gen pass
    chunk_tokens: int = 50  # speech tokens between later passes (after the ramp)
    holdback: int = LOOKAHEAD  # tokens whose mel waits for later tokens (>= the lookahead)
    hift_left: int = 16  # mel frames of left context re-vocoded per pass
    hift_right: int = 8  # mel frames held back until their right context is known
    flow_prompt: int | None = 25  # prompt tokens (its last ones) a pass sees; None: all
    flow_context: int | None = 10  # emitted tokens a pass re-runs as left context; None: all
    ramp: bool = True  # early later-passes come sooner (next_pass)
    ramp_growth: int = 4  # tokens each ramped step adds to the one before

    def next_pass(self, tokens: int) -> int:
        """The token count of the pass after one made at `tokens`. Ramped: the second pass 2
        first_tokens after the first (a player starts on those two chunks), each later step
        `ramp_growth` tokens longer, up to chunk_tokens (`stall_s`); unramped: chunk_tokens."""
        if not self.ramp:
            return tokens + self.chunk_tokens
        point, step = self.first_tokens, 2 * self.first_tokens
        while point <= tokens:
            point, step = point + min(self.chunk_tokens, step), step + self.ramp_growth
        return point

    def pass_points(self, total: int) -> list[int]:
        """The token counts of the non-final passes of a `total`-token stream."""
        points, n = [], self.first_tokens
        while n < total:
            points.append(n)
            n = self.next_pass(n)
        return points

    def emitted_tokens(self, tokens: int) -> int:
        """Tokens' worth of audio handed out after a non-final pass at `tokens`: the last
        holdback tokens' mel waits, and HiFT holds back hift_right frames of that."""
        return max(0, tokens - self.holdback - self.hift_right // 2)

    def __post_init__(self) -> None:
        for name, least in (("flow_prompt", 1), ("flow_context", 0)):
            if getattr(self, name) is not None and getattr(self, name) < least:
                raise ValueError(f"{name} must be None or >= {least}")
        if self.ramp_growth < 0:
            raise ValueError("ramp_growth must be >= 0")


@dataclass(frozen=True)
class ChunkKnobs:
    """A stream's chunk sizes by name, read with its sampling (the model's `with_knobs`); None:
    the request's `chunking`'s. Served (in place of the shared chunk sizes: a chunk is an S3Gen
    pass, which re-runs the flow) with StreamChunking's defaults; one token is 40 ms of audio."""

    first_chunk_tokens: int | None = knob(
        None,
        1,
        200,
        default=StreamChunking.first_tokens,
        label="First S3Gen chunk (tokens)",
        step=1,
        ui_range=(4, 100),
        help="Speech tokens before the first audio is made: fewer start sooner, but the "
        "first audio is shorter and each pass costs a flow run.",
    )
    chunk_tokens: int | None = knob(
        None,
        1,
        400,
        default=StreamChunking.chunk_tokens,
        label="Later S3Gen chunks (tokens)",
        step=1,
        ui_range=(4, 200),
        help="Speech tokens between later passes: more cost fewer flow runs.",
    )

    def chunking(self, base: StreamChunking | None) -> StreamChunking | None:
        """`base` (None: the default) with the sizes given; `base` itself when none is."""
        cuts = {"first_tokens": self.first_chunk_tokens, "chunk_tokens": self.chunk_tokens}
        cuts = {name: int(value) for name, value in cuts.items() if value is not None}
        return replace(base or StreamChunking(), **cuts) if cuts else base


# The whole-utterance pass (`generate(stream_noise=True)`, the streams' reference): one final
# push over the whole prompt and every token.
WHOLE_UTTERANCE = StreamChunking(flow_prompt=None, flow_context=None)


@dataclass(frozen=True)
class StreamCost:
    """A stream's time on one machine: T3's prefill and each draw, and each S3Gen pass (flow
    + HiFT) as a fixed part plus a part per new token; T3 and S3Gen run in turn."""

    prefill_s: float
    token_s: float
    pass_s: float
    pass_token_s: float = 0.0


def chunk_timeline(
    chunking: StreamChunking, total: int, cost: StreamCost, silence: int = 3
) -> list[tuple[float, float]]:
    """(arrival s, audio s) of each chunk of a `total`-token stream under `cost`; the final
    pass adds `silence` tokens (model.py's silence) and hands out the rest."""
    arrivals, clock, made, emitted = [], cost.prefill_s, 0, 0
    for point in [*chunking.pass_points(total), total]:
        clock += (point - made) * (cost.token_s + cost.pass_token_s) + cost.pass_s
        upto = total + silence if point == total else chunking.emitted_tokens(point)
        arrivals.append((clock, (upto - emitted) * TOKEN_SECONDS))
        made, emitted = point, max(emitted, upto)
    return arrivals


def stall_s(arrivals: list[tuple[float, float]], buffer_s: float = 0.25) -> float:
    """How long a player stalls in all, given (arrival s, audio s) in order: it starts at the
    arrival that brings its buffer to `buffer_s` (the last one if never) and plays at real
    time, so the total stall is the largest lateness max_j(a_j - start - sum_{i<j} d_i), or 0
    (as benchmarks/listeners_bench.py `playback`). Negative: the schedule's least margin."""
    buffered, start = 0.0, len(arrivals) - 1
    for index, (_, audio) in enumerate(arrivals):
        buffered += audio
        if buffered >= buffer_s:
            start = index
            break
    played_by, lateness = arrivals[start][0], []
    for index in range(start + 1, len(arrivals)):
        played_by += arrivals[index - 1][1] if index - 1 > start else buffered
        lateness.append(arrivals[index][0] - played_by)
    return max(lateness, default=0.0)
