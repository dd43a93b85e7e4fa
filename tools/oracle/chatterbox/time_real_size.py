"""Real-size Turbo timing with random weights, ours or the official, per part (a cost anchor:
no checkpoint needed, nothing saved).

    .venv/bin/python tools/oracle/chatterbox/time_real_size.py --impl ours [--threads 2]
    .chatterbox-venv/bin/python tools/oracle/chatterbox/time_real_size.py --impl official

T3: a 1 + 375 + 30 + 1 position prompt (speaker, prompt tokens, text, start) then N forced
tokens (draws replaced by fixed tokens, so both runs do the same steps); flow: N + 3 tokens after
a 150-token prompt (2 meanflow steps); HiFT: the resulting mel. Times are the best of `--repeat`.
"""

from __future__ import annotations

import argparse
import time

import torch

PROMPT_T3, TEXT, PROMPT_S3 = 375, 30, 150


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def ours(n: int, repeat: int) -> dict[str, float]:
    from tts_core.models.chatterbox.config import ChatterboxSizes
    from tts_core.models.chatterbox.flow import Flow
    from tts_core.models.chatterbox.hift import HiFTGenerator
    from tts_core.models.chatterbox.sampling import TurboSampling
    from tts_core.models.chatterbox.t3 import T3Turbo

    sizes = ChatterboxSizes()
    t3 = T3Turbo(sizes.t3).eval()
    flow = Flow(sizes.encoder, sizes.decoder, sizes.campplus.embedding_size).eval()
    hift = HiFTGenerator(sizes.hift).eval()
    with torch.no_grad():  # our modules leave init to the checkpoint: random values here
        for module in (t3, flow, hift):
            for param in module.parameters():
                param.normal_(0.0, 0.02)
        for snake in (m for m in hift.modules() if type(m).__name__ == "Snake"):
            snake.alpha.fill_(1.0)
    spk, prompt = torch.randn(1, 256), torch.randint(0, 6561, (1, PROMPT_T3))
    text = torch.randint(0, 50000, (1, TEXT))
    forced = torch.randint(0, 6561, (n,))
    tokens = torch.randint(0, 6561, (1, n + 3))
    p_tok, p_feat = torch.randint(0, 6561, (1, PROMPT_S3)), torch.randn(1, 2 * PROMPT_S3, 80)
    emb, gen = torch.randn(1, 192), torch.Generator()
    mel = flow.inference(tokens, p_tok, p_feat, emb, gen)
    return {
        "t3": best(
            lambda: t3.generate(spk, prompt, text, TurboSampling(), None, forced=forced), repeat
        ),
        "flow": best(lambda: flow.inference(tokens, p_tok, p_feat, emb, gen), repeat),
        "hift": best(lambda: hift.inference(mel, gen), repeat),
    }


def official(n: int, repeat: int) -> dict[str, float]:
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp = T3Config(text_tokens_dict_size=50276)
    hp.llama_config_name, hp.speech_tokens_dict_size = "GPT2_medium", 6563
    hp.input_pos_emb, hp.speech_cond_prompt_len = None, 375
    hp.use_perceiver_resampler, hp.emotion_adv = False, False
    t3, s3gen = T3(hp).eval(), S3Gen(meanflow=True).eval()
    spk, prompt = torch.randn(1, 256), torch.randint(0, 6561, (1, PROMPT_T3))
    text = torch.randint(0, 50000, (1, TEXT))
    forced_tokens = torch.randint(0, 6561, (n,)).tolist() + [6562]
    tokens = torch.randint(0, 6561, (n + 3,))
    ref = {"prompt_token": torch.randint(0, 6561, (1, PROMPT_S3)),
           "prompt_token_len": torch.tensor([PROMPT_S3]),
           "prompt_feat": torch.randn(1, 2 * PROMPT_S3, 80), "prompt_feat_len": None,
           "embedding": torch.randn(1, 192)}  # fmt: skip

    def run_t3():
        forced = iter(forced_tokens)
        multinomial = torch.multinomial
        torch.multinomial = lambda probs, num_samples: torch.tensor([[next(forced)]])
        try:
            cond = T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=prompt, emotion_adv=None)
            t3.inference_turbo(cond, text, max_gen_len=n)
        finally:
            torch.multinomial = multinomial

    mel = s3gen.flow_inference(tokens, ref_dict=dict(ref), n_cfm_timesteps=2, finalize=True)
    return {
        "t3": best(run_t3, repeat),
        "flow": best(
            lambda: s3gen.flow_inference(
                tokens, ref_dict=dict(ref), n_cfm_timesteps=2, finalize=True
            ),
            repeat,
        ),  # fmt: skip
        "hift": best(lambda: s3gen.hift_inference(mel), repeat),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=("ours", "official"), required=True)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.inference_mode():
        times = (ours if args.impl == "ours" else official)(args.tokens, args.repeat)
    audio_s = args.tokens * 0.04
    total = sum(times.values())
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
    print(f"{args.impl}: {args.tokens} tokens ({audio_s:.1f} s audio), {args.threads} threads: "
          f"{parts}; T3 {1000 * times['t3'] / args.tokens:.0f} ms/token incl. prefill; "
          f"RTF (no watermark) {total / audio_s:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
