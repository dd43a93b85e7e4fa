"""TADA's generation loop (hume-tada TadaForCausalLM.generate / _generate, inference options
without candidates or speed-up), on our LM, flow head and decoder.

Cloning is prompt continuation. `build_inputs` lays out the official sequence: BOS, the chat
prefix, the transcript's tokens then the target text's (`text_tokens`), `shift_acoustic`
<|eot_id|>; the prompt's acoustic vectors and durations (frames since the previous token) are
aligned to it with the prefix padded in front and the last `transition` (5) prompt tokens cut.

`Generation` then runs the LM as the official: a causal prefill of the prompt part, then one step
per position on two rows, the text row and the unconditional row (its tokens replaced by the pad
token except the header/turn tokens) whose hidden state is the flow head's negative condition;
per step the flow head turns N(0, T^2) noise (acoustic dims, then duration dims: two draws) into
the acoustic vector and two Gray-coded durations, `shift_acoustic` tokens behind the text. The
last input position samples one more token (repetition penalty, temperature, top-k, top-p, as
the official; num_extra_steps more continue from there). Random numbers are drawn from
`generator` in the official order (per step: acoustic noise, duration noise, then the token
draw if any).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from ..layers import Span
from . import gray_code
from .flow_head import FlowOptions, solve
from .knobs import TadaKnobs
from .lm import TadaLM
from .tokenizer import TadaTokenizer

CHAT_PREFIX = (
    "<|start_header_id|>system<|end_header_id|><|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>"
)
FRAME_RATE = 50
SAMPLE_RATE = 24000


@dataclass(frozen=True)
class TextSampling:
    """The text part of InferenceOptions (its defaults; the served ones TadaKnobs')."""

    do_sample: bool = True
    temperature: float = TadaKnobs.temperature
    top_k: int = 0
    top_p: float = TadaKnobs.top_p
    repetition_penalty: float = TadaKnobs.repetition_penalty


@dataclass(frozen=True)
class GenerateOptions:
    flow: FlowOptions = field(default_factory=FlowOptions)
    text: TextSampling = field(default_factory=TextSampling)
    transition_steps: int = 5  # num_transition_steps
    extra_steps: int = 0  # num_extra_steps
    # The upstream streaming pull request's (HumeAI/tada #16) two generate() fixes, off by
    # default so that the defaults stay the released 0.1.9 behaviour the goldens pin.
    joint_text: bool = False  # `text_tokens`
    min_trim_frames: int = 0  # `leading_silence`


DEFAULT_OPTIONS = GenerateOptions()


def served_options(knobs: TadaKnobs) -> GenerateOptions:
    """The GenerateOptions of a served request's knobs (the rest: the official defaults)."""
    flow = replace(
        DEFAULT_OPTIONS.flow,
        steps=knobs.flow_steps,
        acoustic_cfg=knobs.acoustic_cfg,
        noise_temperature=knobs.noise_temperature,
    )
    text = replace(
        DEFAULT_OPTIONS.text,
        temperature=knobs.temperature,
        top_p=knobs.top_p,
        repetition_penalty=knobs.repetition_penalty,
    )
    return replace(DEFAULT_OPTIONS, flow=flow, text=text)


@dataclass(frozen=True)
class Prompt:
    """The encoded reference clip (hume-tada's EncoderOutput, the parts generate() reads)."""

    token_values: torch.Tensor  # (N, A) acoustic vector per transcript token, normalised
    token_positions: torch.Tensor  # (N,) int64, 1-based frame of each token
    text: str  # the normalised transcript
    audio_samples: int  # the clip's length at `sample_rate`
    sample_rate: int = SAMPLE_RATE


@dataclass
class Inputs:
    """The official sequence and the prompt's per-position values (see module docstring)."""

    ids: torch.Tensor  # (1, S)
    acoustic: torch.Tensor  # (1, P, A) prompt acoustic vectors (prefix zeros, transition cut)
    masks: torch.Tensor  # (1, P) int64 acoustic masks, already shifted by one as generate() does
    before: torch.Tensor  # (1, P) durations before each prompt token
    after: torch.Tensor  # (1, P)


@dataclass
class Generated:
    output_ids: torch.Tensor  # (1, S - 1 + extra) the next token at each step
    time_before: torch.Tensor  # (1, K + 1) durations of the generated tokens (plus the last)
    acoustic: torch.Tensor  # (1, n, A) de-normalised acoustic vectors, prompt part included
    encoded: torch.Tensor  # (K, A) the generated part that is decoded
    input_ids: torch.Tensor  # (1, S') the sequence, sampled tokens appended


def build_inputs(
    tokenizer: TadaTokenizer,
    lm: TadaLM,
    prompt: Prompt,
    text: str,
    transition: int,
    joint_text: bool = False,
) -> Inputs:
    cfg = lm.cfg
    tokens = text_tokens(tokenizer, prompt.text, text, joint_text)
    prefix = tokenizer.encode(CHAT_PREFIX)
    ids = [tokenizer.bos_id, *prefix, *tokens] + [tokenizer.eot_id] * cfg.shift_acoustic
    frames = math.ceil(prompt.audio_samples / prompt.sample_rate * FRAME_RATE)
    positions = prompt.token_positions.long()
    if len(tokens) < len(positions):  # the official puts the clip's end at that index
        positions = positions.clone()
        positions[len(tokens)] = frames
    gaps = positions - torch.cat([positions.new_ones(1), positions[:-1]])
    gaps = torch.cat([gaps.new_zeros(1), gaps.clamp(0, cfg.num_time_classes - 1)])  # (N + 1,)
    pad = len(prefix)
    values = prompt.token_values
    acoustic = torch.cat([values.new_zeros(pad, values.shape[-1]), values])
    masks = torch.cat(
        [torch.zeros(pad, dtype=torch.long), torch.ones(len(positions), dtype=torch.long)]
    )
    before = torch.cat([gaps.new_zeros(pad), gaps[:-1]])
    after = torch.cat([gaps.new_zeros(pad), gaps[1:]])
    if transition > 0:
        acoustic, masks = acoustic[:-transition], masks[:-transition]
        before, after = before[:-transition], after[:-transition]
    masks = torch.cat([masks[1:], masks.new_ones(1)])
    return Inputs(torch.tensor([ids]), acoustic[None], masks[None], before[None], after[None])


def text_tokens(tokenizer: TadaTokenizer, prompt_text: str, text: str, joint: bool) -> list[int]:
    """The transcript's tokens then the target text's. Official (joint False): each tokenized
    on its own, so no BPE merge crosses the seam and the text's first word starts a fresh
    pre-token with no leading space (".Hello" -> ".H" + "ello" upstream reports; not how the
    model saw running text). Joint (the upstream fix): one string, one space between them."""
    if joint:
        return tokenizer.encode(f"{prompt_text.rstrip()} {text.lstrip()}")
    return tokenizer.encode(prompt_text) + tokenizer.encode(text)


def unconditional_ids(
    tokenizer: TadaTokenizer, ids: torch.Tensor, prompt_tokens: int
) -> torch.Tensor:
    """_generate's `use_text_in_prompt=False`: in the prompt part (the first `prompt_tokens`
    positions) every token outside the chat headers that is not BOS, end-of-text or
    <|eot_id|> becomes the pad token."""
    ids = ids.clone()
    special = (tokenizer.eot_id, tokenizer.bos_id, tokenizer.eos_id)
    keep, in_header = [], False
    for token in ids[0, :prompt_tokens].tolist():
        if token in (tokenizer.start_header_id, tokenizer.end_header_id):
            in_header = token == tokenizer.start_header_id
            keep.append(True)
        else:
            keep.append(in_header or token in special)
    drop = ~torch.tensor(keep, dtype=torch.bool)
    ids[0, :prompt_tokens][drop] = tokenizer.pad_id
    return ids


def prefill_length(inputs: Inputs, shift: int) -> int:
    """_generate's prefill length: the positions whose acoustic and duration inputs all come
    from the prompt."""
    length = inputs.ids.shape[1]
    n_ac = min(length - shift - 1, inputs.acoustic.shape[1] - 1)
    n_t = min(length - shift - 1, inputs.before.shape[1] - 1)
    frames = min(n_ac, n_t, max(0, inputs.before.shape[1] - 2)) if n_ac > 0 and n_t > 0 else 0
    return min(length, shift + frames + 1) if frames > 0 else 0


def prefill_embeds(lm: TadaLM, ids: torch.Tensor, inputs: Inputs, length: int) -> torch.Tensor:
    """_build_prompt_inputs_embeds over `ids` (the prompt's text already replaced by pads, see
    unconditional_ids): position t > shift gets the prompt's acoustic vector t -
    shift - 1 and durations t - shift; summed as token + (acoustic + mask) + (before + after)
    (the official grouping, which differs from a step's)."""
    shift, cfg = lm.cfg.shift_acoustic, lm.cfg
    dtype = lm.acoustic_proj.weight.dtype
    acoustic = torch.zeros(1, length, cfg.acoustic_dim, dtype=dtype)
    masks = torch.zeros(1, length, dtype=torch.long)
    n_ac = min(length - shift - 1, inputs.acoustic.shape[1])
    if n_ac > 0:
        acoustic[:, shift + 1 : shift + 1 + n_ac] = inputs.acoustic[:, :n_ac]
        masks[:, shift + 1 : shift + 1 + n_ac] = inputs.masks[:, :n_ac]
    before = torch.zeros(1, length, dtype=torch.long)
    after = torch.zeros(1, length, dtype=torch.long)
    n_t = min(length - shift - 1, inputs.before.shape[1] - 1)
    if n_t > 0:
        before[:, shift + 1 : shift + 1 + n_t] = inputs.before[:, 1 : 1 + n_t]
        after[:, shift + 1 : shift + 1 + n_t] = inputs.after[:, 1 : 1 + n_t]
    token = lm.model.embed_tokens(ids[:, :length])
    return (
        token
        + (lm.acoustic_proj(acoustic) + lm.acoustic_mask_emb(masks))
        + (lm.time_start_embed(before) + lm.time_end_embed(after))
    )


def sample_token(
    logits: torch.Tensor,
    ids: torch.Tensor,
    pad_id: int,
    options: TextSampling,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """The official draw: logits (1, V), ids (1, S) the sequence so far -> (1, 1)."""
    logits = logits.clone()
    logits[:, pad_id] = float("-inf")
    if not options.do_sample:
        return logits.argmax(dim=-1, keepdim=True)
    if options.repetition_penalty != 1.0:
        score = torch.gather(logits, 1, ids)
        score = torch.where(
            score < 0, score * options.repetition_penalty, score / options.repetition_penalty
        )
        logits = logits.scatter(1, ids, score)
    logits = logits / options.temperature
    if options.top_k > 0:
        k = min(options.top_k, logits.size(-1))
        logits = logits.masked_fill(
            logits < torch.topk(logits, k, dim=-1).values[..., -1:], float("-inf")
        )
    if 0.0 < options.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1)
        remove = cumulative - torch.softmax(ordered, dim=-1) >= options.top_p
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


class DurationOutOfRange(IndexError):
    """A step's predicted duration outside the checkpoint's duration classes: a Gray-code bit
    of the flow head's output left [-2, 2) (gray_code.decode). The official 0.1.9
    fails at the same step of the same seeds with the duration embedding's bare IndexError
    (tools/oracle/tada/seed_sweep.py); random weights do this (the tiny test checkpoints at
    the default noise temperature), a trained head is fitted to bits of -1 and +1."""


def check_durations(before: torch.Tensor, after: torch.Tensor, classes: int) -> None:
    """The durations a step embeds ((1, 1) each) lie in [0, classes), or DurationOutOfRange."""
    for frames in (int(before), int(after)):
        if not 0 <= frames < classes:
            raise DurationOutOfRange(
                f"TADA's flow head predicted a token duration of {frames} frames, outside the "
                f"checkpoint's {classes} duration classes (a Gray-code bit left [-2, 2)); the "
                "official hume-tada fails here too (IndexError in the duration embedding). "
                "Random weights do this: try another seed or a lower noise_temperature."
            )


@dataclass(frozen=True)
class Frame:
    """One step's acoustic output: the `index`-th acoustic vector of the sequence (prompt part
    included; decoded from index `decode_from` on), de-normalised (A,), and its duration (frames
    before it)."""

    index: int
    decode_from: int
    vector: torch.Tensor
    before: int


def generate(
    lm: TadaLM,
    tokenizer: TadaTokenizer,
    prompt: Prompt,
    text: str,
    options: GenerateOptions = DEFAULT_OPTIONS,
    generator: torch.Generator | None = None,
) -> Generated:
    """Prompt continuation with `text` (already normalised): see the module docstring."""
    run = Generation(lm, tokenizer, prompt, text, options, generator)
    run.prefill()
    while not run.done:
        run.step()
    return run.result()


class Generation:
    """One `generate` call as state and steps (what the serving engine drives row by row):
    `prefill()` once, then `step()` until `done`, then `result()`. `next_frame()` steps to the
    next frame that is decoded (index >= decode_from). Every tensor op and random draw is the
    one the official loop makes, in its order."""

    def __init__(
        self,
        lm: TadaLM,
        tokenizer: TadaTokenizer,
        prompt: Prompt,
        text: str,
        options: GenerateOptions = DEFAULT_OPTIONS,
        generator: torch.Generator | None = None,
    ) -> None:
        cfg = lm.cfg
        self.lm, self.tokenizer, self.options, self.generator = lm, tokenizer, options, generator
        self.dtype = lm.acoustic_proj.weight.dtype
        inputs = build_inputs(
            tokenizer, lm, prompt, text, options.transition_steps, options.joint_text
        )
        inputs.acoustic = inputs.acoustic.to(self.dtype)
        self.inputs = inputs
        self.prompt_tokens = inputs.acoustic.shape[1]
        ids = unconditional_ids(tokenizer, inputs.ids, self.prompt_tokens)
        if options.extra_steps > 0:  # the official drops the end-of-turn tokens to continue
            ids = ids[:, : -cfg.shift_acoustic]
        self.ids = ids
        self.steps = ids.shape[1] + options.extra_steps
        self.guided = options.flow.acoustic_cfg != 1.0
        self.rows = 2 if self.guided else 1
        self.length = prefill_length(inputs, cfg.shift_acoustic)
        self.position = 0  # the next step (prefill sets it to `length`)
        self.caches = None
        self.outputs, self.acoustic_out, self.before_out = [], [], []
        self.last_before = None
        self.decode_from = self.prompt_tokens + options.transition_steps - 1
        self.structural = (tokenizer.start_header_id, tokenizer.end_header_id, tokenizer.eot_id)

    @property
    def done(self) -> bool:
        return self.caches is not None and self.position >= self.steps

    @property
    def decoded_frames(self) -> int:
        """Frames `next_frame` hands out in all: steps s >= shift give frame s - shift."""
        first = max(self.length, self.lm.cfg.shift_acoustic + self.decode_from)
        return max(self.steps - first, 0)

    def prefill(self) -> None:
        """The causal prefill of the prompt part (caches of `steps + 1` positions, both rows)."""
        lm, inputs, shift = self.lm, self.inputs, self.lm.cfg.shift_acoustic
        self.caches = lm.new_caches(self.rows, self.steps + 1, self.dtype, "cpu")
        length = self.length
        if length > 0:
            embeds = prefill_embeds(lm, self.ids, inputs, length)
            lm.hidden(embeds.expand(self.rows, -1, -1).contiguous(), Span(self.caches, 0))
            self.outputs += [self.ids[:, s + 1 : s + 2] for s in range(length - 1)]
            frames = length - shift
            self.acoustic_out += [inputs.acoustic[:, i : i + 1] for i in range(frames)]
            self.before_out += [inputs.before[:, i + 1 : i + 2] for i in range(frames)]
            self.acoustic = inputs.acoustic[:, frames - 1 : frames]
            self.masks = inputs.masks[:, frames - 1 : frames]
            self.before = inputs.before[:, frames : frames + 1]
            self.after = inputs.after[:, frames : frames + 1]
        else:
            self.acoustic = torch.zeros(1, 1, self.lm.cfg.acoustic_dim, dtype=self.dtype)
            self.masks = self.before = self.after = torch.zeros(1, 1, dtype=torch.long)
        self.position = length

    def run_transition(self) -> None:
        """The steps after the prefill whose frames are not decoded (the prompt's transition:
        frame index < decode_from), so that each later step gives a decoded frame."""
        while not self.done and self.position < self.lm.cfg.shift_acoustic + self.decode_from:
            self.step()

    def next_frame(self) -> Frame | None:
        """Steps until a decoded frame comes out; None when the generation ended first."""
        while not self.done:
            frame = self.step()
            if frame is not None and frame.index >= frame.decode_from:
                return frame
        return None

    def step(self) -> Frame | None:
        """One LM step on the text and unconditional rows, the flow head's solve, the token draw
        (at the last input position and after); the step's Frame once the acoustic stream has
        started (step >= shift_acoustic)."""
        lm, cfg, flow, rows = self.lm, self.lm.cfg, self.options.flow, self.rows
        tokenizer, ids, inputs, step = self.tokenizer, self.ids, self.inputs, self.position
        shift, bits = cfg.shift_acoustic, cfg.num_time_bits
        token = ids[:, step : step + 1] if step < ids.shape[1] else ids[:, -1:]
        batch_ids = token
        if self.guided:  # the unconditional row: the pad token unless a header/turn token
            kept = token.item() in self.structural
            batch_ids = torch.cat(
                [token, token if kept else torch.full_like(token, tokenizer.pad_id)]
            )
        check_durations(self.before, self.after, cfg.num_time_classes)
        embeds = lm.embed(
            batch_ids,
            self.acoustic.expand(rows, -1, -1),
            self.masks.expand(rows, -1),
            self.before.expand(rows, -1),
            self.after.expand(rows, -1),
        )
        hidden = lm.hidden(embeds, Span(self.caches, step))[:, 0]  # (rows, H)
        cond = hidden[:1]
        neg_cond = hidden[1:] if self.guided else torch.zeros_like(cond)
        generator = self.generator
        acoustic_noise = torch.randn(1, cfg.acoustic_dim, generator=generator).to(cond)
        duration_noise = torch.randn(1, 2 * bits, generator=generator).to(cond)
        noise = torch.cat([acoustic_noise, duration_noise], dim=-1) * flow.noise_temperature
        speech = solve(
            lm.prediction_head, noise, cond, neg_cond, flow, cfg.acoustic_dim, lm.condition
        )
        durations = speech[..., -2 * bits :]
        predicted_before = gray_code.decode(durations[..., :bits], bits)[None]  # (1, 1)
        predicted_after = gray_code.decode(durations[..., bits:], bits)[None]
        if step >= ids.shape[1] - 1:
            logits = lm.logits(hidden)[:1]  # both rows, as the official batch
            drawn = sample_token(logits, ids, tokenizer.pad_id, self.options.text, generator)
            self.ids = torch.cat([ids, drawn.long()], dim=1)
            self.outputs.append(drawn)
        else:
            self.outputs.append(ids[:, step + 1 : step + 2])
        self.position = step + 1
        if step < shift:
            return None
        index = step - shift
        if index < inputs.acoustic.shape[1]:
            self.acoustic = inputs.acoustic[:, index : index + 1]
            self.masks = inputs.masks[:, index : index + 1]
        else:
            self.acoustic = speech[None, :, : cfg.acoustic_dim]
            self.masks = torch.ones(1, 1, dtype=torch.long)
        self.acoustic_out.append(self.acoustic)
        if index < inputs.before.shape[1] - 1:
            self.before = inputs.before[:, index + 1 : index + 2]
            self.after = inputs.after[:, index + 1 : index + 2]
        else:
            self.before, self.after = predicted_before, predicted_after
        self.before_out.append(self.before)
        self.last_before = self.before
        index = len(self.acoustic_out) - 1
        vector = self.acoustic[0, 0] * cfg.acoustic_std + cfg.acoustic_mean
        return Frame(index, self.decode_from, vector, int(self.before))

    def result(self) -> Generated:
        cfg = self.lm.cfg
        before_out = list(self.before_out)
        if self.last_before is not None:
            before_out.append(self.last_before)
        acoustic_all = torch.cat(self.acoustic_out, dim=1) * cfg.acoustic_std + cfg.acoustic_mean
        start = self.decode_from
        time_before = torch.cat(before_out, dim=1)[:, start:]
        return Generated(
            torch.cat(self.outputs, dim=1),
            time_before,
            acoustic_all,
            acoustic_all[0, start:],
            self.ids,
        )


def expand_for_decoder(encoded: torch.Tensor, time_before: torch.Tensor):
    """_decode_wav's input: per token (duration - 1) zero frames then its vector, then
    time_before[-1] zero frames. encoded (K, A), time_before (K + 1,) -> expanded (1, T, A) and
    token_masks (1, T) (frames whose vector is not all zero)."""
    time_before = time_before[: encoded.shape[0] + 1]
    pieces = []
    for position in range(encoded.shape[0]):
        pieces.append(encoded.new_zeros(max(int(time_before[position]) - 1, 0), encoded.shape[1]))
        pieces.append(encoded[position : position + 1])
    pieces.append(encoded.new_zeros(int(time_before[-1]), encoded.shape[1]))
    expanded = torch.cat(pieces)[None]
    return expanded, (torch.norm(expanded, dim=-1) != 0).long()


def leading_silence(time_before: torch.Tensor, min_frames: int = 0) -> int:
    """Samples trimmed from the start: the first token's duration in frames (official), at
    least `min_frames` (the upstream pull request clamps it to 5 frames, 100 ms)."""
    return trim_samples(int(time_before[0]), min_frames)


def trim_samples(first_before: int, min_frames: int = 0) -> int:
    """Samples of `max(first_before, min_frames)` frames (official: int(24000 x frames / 50))."""
    return int(SAMPLE_RATE * max(first_before, min_frames) / FRAME_RATE)
