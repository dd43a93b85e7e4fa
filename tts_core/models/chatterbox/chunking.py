"""How a Chatterbox stream cuts its S3Gen work (`StreamChunking`): plain numbers, no torch, so
the backends declare their knobs from these defaults without loading the model's code."""

from __future__ import annotations

from dataclasses import dataclass

from .config import LOOKAHEAD


@dataclass(frozen=True)
class StreamChunking:
    """How a stream cuts S3Gen's work. Defaults from benchmarks/chatterbox_stream_bench.py
    (BENCHMARKS.md): a pass bounded to the prompt's last 25 tokens and 10 tokens of left context
    costs ~90 tokens of flow work instead of prompt (up to 250) + every token so far; against
    the whole pass, 37.8-46.8 dB with the ramp and 50-token passes (tiny; 41.9 real size) where
    the unbounded stream has 38.2-52.6 (48.9). 50 tokens between passes halve the passes' cost
    per second of audio against 25; the ramp (`next_pass`) makes the first ones come sooner.
    The first chunk holds first_tokens - holdback - hift_right / 2 tokens (5: 200 ms)."""

    first_tokens: int = 12  # speech tokens before the first S3Gen pass
    chunk_tokens: int = 50  # speech tokens between later passes (after the ramp)
    holdback: int = LOOKAHEAD  # tokens whose mel waits for later tokens (>= the lookahead)
    hift_left: int = 16  # mel frames of left context re-vocoded per pass
    hift_right: int = 8  # mel frames held back until their right context is known
    flow_prompt: int | None = 25  # prompt tokens (its last ones) a pass sees; None: all
    flow_context: int | None = 10  # emitted tokens a pass re-runs as left context; None: all
    ramp: bool = True  # early later-passes come sooner (next_pass)

    def next_pass(self, tokens: int) -> int:
        """The token count of the pass after one made at `tokens`: chunk_tokens later, or
        sooner while the stream is young (`ramp`: as many tokens as it has, so the early chunks
        double, 12, 24, 48, ..., up to chunk_tokens: the first chunks come out while little
        audio is queued ahead of them, the later ones cost fewer passes)."""
        step = min(self.chunk_tokens, max(1, tokens)) if self.ramp else self.chunk_tokens
        return tokens + step

    def pass_points(self, total: int) -> list[int]:
        """The token counts of the non-final passes of a `total`-token stream."""
        points, n = [], self.first_tokens
        while n < total:
            points.append(n)
            n = self.next_pass(n)
        return points

    def __post_init__(self) -> None:
        for name in ("flow_prompt", "flow_context"):
            value = getattr(self, name)
            if value is not None and value < (1 if name == "flow_prompt" else 0):
                raise ValueError(f"{name} must be None or >= {1 if name == 'flow_prompt' else 0}")


# The whole-utterance pass (`generate(stream_noise=True)`, the streams' reference): one final
# push over the whole prompt and every token.
WHOLE_UTTERANCE = StreamChunking(flow_prompt=None, flow_context=None)
