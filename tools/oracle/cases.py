"""The generation cases recorded for each tiny checkpoint (texts, languages, lengths).

tiny-a: ICL with language "auto" (all text fits in the prefill, runs to max_new_tokens) and
x-vector with "english" (its EOS row is calibrated so greedy stops on EOS mid-way).
tiny-b: ICL with "chinese" and a long text (T1 > T2: trailing text in ICL mode) and x-vector
with "auto"; both run to max_new_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    key: str  # "icl" or "xvec": golden tensors are <key>_codes / <key>_audio
    text: str
    language: str
    max_new_tokens: int
    ref_text: str | None  # None -> x-vector-only mode


REF_TEXT = "This is a synthetic reference voice, made for testing."
REF_TEXT_ZH = "这是一个用于测试的合成参考声音，" * 2

CASES = {
    "qwen3-tiny-a": (
        Case(
            "icl",
            "Hello world! This tiny model speaks 12 words, more or less.",
            "auto",
            40,
            REF_TEXT,
        ),
        Case("xvec", "Streaming voice cloning, tested frame by frame.", "english", 50, None),
    ),
    "qwen3-tiny-b": (
        Case(
            "icl",
            "今天天气很好，我们去公园散步吧。The weather is nice today, let's go "
            "for a walk in the park and talk about speech synthesis!",
            "chinese",
            30,
            REF_TEXT_ZH,
        ),
        Case("xvec", "Short x-vector case: 3 frames? No, thirty.", "auto", 30, None),
    ),
}
EOS_CASE = {"qwen3-tiny-a": "xvec"}  # checkpoint -> case whose greedy run must end on EOS
EOS_FRAME_RANGE = (15, 40)  # the calibrated EOS should arrive within this many frames
