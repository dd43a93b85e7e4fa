"""VoxCPM2 text-to-speech in our PyTorch, equal to the official voxcpm==2.0.3 (issue #14).

```python
model = VoxCPMModel.from_folder(folder, device="cpu", dtype=torch.float32)
voice = model.create_voice(audio, sample_rate, ref_text=None)  # any rate; None: reference only
result = model.generate(text, voice, seed=0, cfg_value=2.0, inference_timesteps=10, max_len=4096)
result.audio  # float32 (N,) at model.sample_rate (audio_vae_config.out_sample_rate)
for chunk in model.stream(text, voice, seed=0, chunk_patches=1): ...  # concatenated == generate
```

Modes (spec section 6): voice None = zero-shot [text]; `create_voice(audio, sr)` = reference
only [ref, text]; with `ref_text` = reference + continuation [ref, transcript + text, prompt],
the same clip as reference and prompt. Noise: one `randn((1, D, P))` per patch from a
`torch.Generator` seeded with `seed` (float32, CPU), the official draws after
`torch.manual_seed(seed)`. Not reproduced on purpose: retry_badcase (off in the contract),
the denoiser and text normalization (`normalize=True`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...serving.alone import InlineOutbox, run_alone
from ...serving.batch import BatchEngine
from ..contract import SeededStream, read_knobs, reference_audio, resolve_seed
from .audiovae import AudioVAE
from .checkpoint import load_model_state, resolve_folder
from .config import VoxCPM2Config
from .knobs import CHUNK_NAMES, VoxKnobs, VoxStreamKnobs
from .network import DecodeState, VoxCPM2Network
from .runner import AudioChunk, PatchChunk, Prompt, VoxRunner, VoxSequence
from .tokenizer import VoxCPMTokenizer, normalize_target_text
from .vae_streaming import VAEDecoderState
from .voice import Voice, pad_to_patches, resample, to_mono

AUDIO_START, REF_AUDIO_START, REF_AUDIO_END = 101, 103, 104
LENGTH_RATIO = 6.0  # retry_badcase_ratio_threshold: caps the length even with retries off
LENGTH_EXTRA = 10
CONTEXT_PATCHES = 3  # streaming_prefix_len (4) - 1
MODEL = "VoxCPM2"  # in the errors that list its knobs


@dataclass
class GenerationResult:
    audio: np.ndarray  # float32 (N,) at sample_rate
    sample_rate: int
    patches: int
    stop_reason: str  # "stop_head" or "length_cap"
    seed: int | None = None  # the seed used: passed back, the same audio (models/contract.py)


class VoxCPMModel:
    def __init__(
        self, cfg: VoxCPM2Config, net: VoxCPM2Network, vae: AudioVAE, tok: VoxCPMTokenizer
    ) -> None:
        self.config = cfg
        self.net = net
        self.vae = vae
        self.tokenizer = tok
        self.sample_rate = cfg.audio_vae.out_sample_rate
        self.patch_size = cfg.patch_size

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> VoxCPMModel:
        """Strict load of config.json, model.safetensors, audiovae.{safetensors,pth} and
        tokenizer.json. The VAE runs in float32 (float64 when dtype is float64, for tests)."""
        cfg = VoxCPM2Config.from_folder(folder)
        tok = VoxCPMTokenizer.from_folder(folder)
        if tok.vocab_size > cfg.lm.vocab_size:
            raise ValueError(
                f"tokenizer.json has {tok.vocab_size} tokens, lm_config.vocab_size is "
                f"{cfg.lm.vocab_size}"
            )
        net = VoxCPM2Network(cfg)
        load_model_state(net, folder)
        vae_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        vae = AudioVAE.from_folder(folder, device, vae_dtype, cfg.audio_vae)
        return cls(cfg, net.to(device=device, dtype=dtype).eval(), vae, tok)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> VoxCPMModel:
        """A Hub repo id (only the needed files are downloaded) or a local folder."""
        return cls.from_folder(resolve_folder(name_or_path), device=device, dtype=dtype)

    # --- voices ------------------------------------------------------------------------------
    def _encode_clip(self, audio: np.ndarray, left: bool) -> torch.Tensor:
        patch_samples = self.patch_size * self.vae.hop_length
        clip = pad_to_patches(torch.from_numpy(audio)[None], patch_samples, left)
        latents = self.vae.encode(clip)  # (1, D, T * P)
        return latents.reshape(latents.shape[1], -1, self.patch_size).permute(1, 2, 0)

    def create_voice(
        self,
        audio: np.ndarray | torch.Tensor | str | Path,
        sample_rate: int | None = None,
        ref_text: str | None = None,
    ) -> Voice:
        """A voice from a clip at any rate ((N,) or (N, channels)), or a path to an audio file.
        With `ref_text` (its transcript) the clip is also the continuation prompt and the
        decoder is warmed on the context patches once here (spec section 13)."""
        if not isinstance(audio, torch.Tensor):
            audio, sample_rate = reference_audio(audio, sample_rate)
        elif sample_rate is None:
            raise TypeError("create_voice(audio, sample_rate): pass the clip's sample rate")
        clip = resample(to_mono(audio), int(sample_rate), self.vae.sample_rate)
        ref = self._encode_clip(clip, left=False)
        if ref_text is None:
            return Voice(ref_patches=ref)
        prompt = self._encode_clip(clip, left=True)
        ctx = min(CONTEXT_PATCHES, ref.shape[0] + prompt.shape[0])
        context = torch.cat([ref, prompt])[-ctx:]
        state = self.vae.init_state(batch_size=1)
        self.vae.decode_step(self._latents(context), state)
        return Voice(ref, ref_text, prompt, context, state)

    # --- generation --------------------------------------------------------------------------
    def _latents(self, patches: torch.Tensor) -> torch.Tensor:
        """(n, P, D) patches -> (1, D, n P) VAE latents."""
        return patches.reshape(-1, patches.shape[-1]).T[None].to(self.vae.dtype)

    def _prompt(self, text: str, voice: Voice | None, max_len: int) -> Prompt:
        target = normalize_target_text(text)
        cap = min(int(len(self.tokenizer.encode(target)) * LENGTH_RATIO + LENGTH_EXTRA), max_len)
        prefix = voice.ref_text if voice is not None and voice.ref_text is not None else ""
        ids = self.tokenizer.encode(prefix + target) + [AUDIO_START]
        dev, dtype = self.net.device, self.net.dtype
        empty = torch.zeros(1, self.patch_size, self.config.feat_dim, dtype=dtype, device=dev)
        tokens: list[int] = []
        patches: list[torch.Tensor] = []
        is_audio: list[int] = []

        def add(token_ids: list[int], feats: torch.Tensor | None) -> None:
            tokens.extend(token_ids)
            patches.append(empty.expand(len(token_ids), -1, -1) if feats is None else feats)
            is_audio.extend([0 if feats is None else 1] * len(token_ids))

        if voice is not None:
            add([REF_AUDIO_START], None)
            add([0] * voice.ref_patches.shape[0], voice.ref_patches.to(dev, dtype))
            add([REF_AUDIO_END], None)
        add(ids, None)
        if voice is not None and voice.prompt_patches is not None:
            add([0] * voice.prompt_patches.shape[0], voice.prompt_patches.to(dev, dtype))
        room = self.config.max_length - len(tokens)  # the static caches hold max_length positions
        if room < 1:
            raise ValueError(
                f"the reference and text take {len(tokens)} positions; this model holds "
                f"{self.config.max_length}: use a shorter reference clip or text"
            )
        cap = min(cap, room)
        audio_mask = torch.tensor(is_audio, dtype=dtype, device=dev)[None]
        return Prompt(
            tokens=torch.tensor(tokens, dtype=torch.int64, device=dev)[None],
            patches=torch.cat(patches)[None],
            text_mask=1 - audio_mask,
            audio_mask=audio_mask,
            cap=cap,
        )

    def generate(
        self, text: str, voice: Voice | None = None, seed: int | None = None, **knobs: Any
    ) -> GenerationResult:
        """The whole utterance: the patches of `stream`'s engine (one row, this thread), then
        decoded in one VAE pass after the context patches. seed None: a random one
        (`result.seed`); `knobs`: VoxKnobs' by name (a stream's chunk sizes are a TypeError)."""
        read_knobs(MODEL, VoxKnobs, knobs)
        seed = resolve_seed(seed)
        seq = self.request(text, voice, seed, audio=False, outbox=InlineOutbox(), **knobs)
        chunks = list(self._alone(seq))
        generated = torch.stack([patch for chunk in chunks for patch in chunk.patches])
        context = None if voice is None else voice.context_patches  # (ctx, P, D) or None
        latents = generated if context is None else torch.cat([context, generated])
        audio = self.vae.decode(self._latents(latents))[0]
        skip = 0 if context is None else context.shape[0] * self.patch_size
        audio = audio[skip * self.vae.decode_hop_length :]
        return GenerationResult(
            audio=audio.float().cpu().numpy(),
            sample_rate=self.sample_rate,
            patches=generated.shape[0],
            stop_reason=chunks[-1].stop_reason,
            seed=seed,
        )

    def stream(
        self, text: str, voice: Voice | None = None, seed: int | None = None, **kwargs: Any
    ) -> SeededStream:
        """The same audio as `generate`, decoded every `chunk_patches` patches (the first chunk
        after `first_chunk_patches`, default the same) on the voice's warm decoder state, cloned.
        `kwargs`: `request`'s should_stop and VoxStreamKnobs' by name (first_chunk_frames /
        chunk_frames read as the patch counts; another name is a TypeError listing them).
        `should_stop` is asked before every patch: True ends the stream there. The last chunk of
        a stream not stopped carries `stop_reason`. seed None: a random one (`.seed`).

        The engine with one row (runner.py), stepped on the thread that iterates: the chunks the
        served loop gives the same request. Bad input raises now; closing the generator frees
        the request's caches."""
        seed = resolve_seed(seed)
        seq = self.request(text, voice, seed, outbox=InlineOutbox(), **kwargs)
        return SeededStream(self._alone(seq), seed)

    def request(
        self,
        text: str,
        voice: Voice | None = None,
        seed: int = 0,
        *,
        should_stop: Callable[[], bool] | None = None,
        audio: bool = True,
        outbox: Any = None,
        **knobs: Any,
    ) -> VoxSequence:
        """A checked request for the engine (`stream`'s arguments; ValueError on bad input):
        its prompt, sampling and chunk cadence. `outbox` None: for a consumer on another
        thread (the served EngineLoop); audio False: patches only (`generate`)."""
        chosen = read_knobs(MODEL, VoxStreamKnobs, knobs, CHUNK_NAMES)
        prompt = self._prompt(text, voice, chosen.max_len)
        sampling = (int(seed), float(chosen.cfg_value), int(chosen.inference_timesteps))
        cadence, stop = chosen.cadence(), should_stop or _never
        return VoxSequence(prompt, voice, sampling, cadence, stop, audio=audio, outbox=outbox)

    def runner(self, max_batch: int) -> VoxRunner:
        """The engine's StepModel for this model, `max_batch` rows at most."""
        return VoxRunner(self, max_batch)

    def _alone(self, seq: VoxSequence) -> Iterator[AudioChunk | PatchChunk]:
        """`seq` (made with an InlineOutbox) stepped by a private one-row engine on the thread
        that iterates; its whole prompt prefilled in one step."""

        def engine() -> BatchEngine:
            return BatchEngine(self.runner(1), prefill_chunk=seq.prompt_len, isolate_failures=False)

        return run_alone(engine, seq)

    @torch.inference_mode()
    def prefill(self, prompt: Prompt) -> tuple[DecodeState, torch.Tensor]:
        """A request's LM state after its prompt (caches of prompt + length cap positions) and
        its first CFM condition: the prompt's last patch (zeros unless it ends with audio)."""
        positions = prompt.tokens.shape[1] + prompt.cap  # the last step writes at P + cap - 1
        state = self.net.prefill(
            prompt.tokens, prompt.patches, prompt.text_mask, prompt.audio_mask, positions
        )
        return state, prompt.patches[:, -1]

    def new_decoder_state(self, voice: Voice | None) -> VAEDecoderState:
        """A stream's VAE decoder state: the voice's warm state cloned, or a fresh one."""
        warm = None if voice is None else voice.warm_decoder
        return warm.clone() if warm is not None else self.vae.init_state(batch_size=1)

    def decode_chunk(
        self,
        patches: list[torch.Tensor],
        state: VAEDecoderState,
        stop_reason: str | None = None,
        batch_size: int = 1,
    ) -> AudioChunk:
        """Patches (each (P, D)) -> the next AudioChunk of the stream whose decoder state this
        is (no patches: an empty chunk)."""
        if not patches:
            audio = np.zeros(0, np.float32)
        else:
            audio = self.vae.decode_step(self._latents(torch.stack(patches)), state)[0]
            audio = audio.float().cpu().numpy()
        return AudioChunk(audio, self.sample_rate, len(patches), stop_reason, batch_size)


def _never() -> bool:
    return False
