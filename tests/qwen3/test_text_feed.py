"""TextFeed (issue #27): text fed in pieces commits exactly the whole text's target ids.

Every recorded tokenizer string (punctuation, digits, CJK, emoji, accents, whitespace runs,
special tokens written as text) is fed by character, by word and in random splits; the ids
committed before `finish()` must be a prefix of the whole text's ids at every step, and all ids
after `finish()` must equal them.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
import torch

from tts_core.models.qwen3_tts.prompt import target_text_ids
from tts_core.models.qwen3_tts.serving.fed import FedRequest
from tts_core.models.qwen3_tts.text_feed import TextFeed
from tts_core.models.qwen3_tts.text_tokenizer import TextTokenizer

from .conftest import fixture_path


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer.from_folder(fixture_path("qwen3-tiny-a"))


def _texts(cases: list[dict]) -> list[str]:
    texts = [c["text"] for c in cases if c["text"].strip()]
    texts += [
        "Hello there,  my friend!\n\nHow are you?",
        "\n\nleading newlines then words",
        "  leading spaces",
        "trailing spaces   ",
        "HELLOworld ABc dEF 1234567 3.14159 e\u0301cole cafe\u0301 na\u00efve",
        "你好，世界。今天天气很好！我们去公园吧",
        "a<|im_end|>b <|endoftext|> <| <|im",
        "mixed 😀😀 emoji, don't won't I'm they're /path/to?x=1&y=2",
    ]
    return texts


def _whole(tokenizer: TextTokenizer, text: str) -> list[int]:
    return target_text_ids(tokenizer, text)[3:-5]


def _pieces_by(mode: str, text: str, rng: random.Random) -> list[str]:
    if mode == "char":
        return list(text)
    if mode == "word":
        words = text.split(" ")
        return [w + " " for w in words[:-1]] + [words[-1]]
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 6))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("mode", ["char", "word", "random"])
def test_fed_ids_equal_whole_text_ids(
    tokenizer: TextTokenizer, tokenizer_cases: list[dict], mode: str
) -> None:
    rng = random.Random(27)
    failures = []
    committed_early = 0
    for text in _texts(tokenizer_cases):
        whole = _whole(tokenizer, text)
        feed = TextFeed(tokenizer)
        for piece in _pieces_by(mode, text, rng):
            feed.feed(piece)
            if feed.committed != whole[: len(feed.committed)]:
                failures.append(f"{text!r}: prefix {feed.committed} vs {whole}")
                break
        else:
            committed_early += len(feed.committed)
            feed.finish()
            if feed.committed != whole:
                failures.append(f"{text!r}: {feed.committed} vs {whole}")
    assert not failures, "\n".join(failures[:10])
    assert committed_early > 0  # the feed streams: ids are committed before finish()


def test_commits_all_but_the_last_piece(tokenizer: TextTokenizer) -> None:
    feed = TextFeed(tokenizer)
    assert feed.feed("Hello") == []  # "Hello" may still become "Hellos"
    first = feed.feed(" wor")
    assert tokenizer.decode(first) == "Hello"
    assert tokenizer.decode(feed.feed("ld. Next")) == " world."
    assert tokenizer.decode(feed.finish()) == " Next"
    with pytest.raises(ValueError):
        feed.feed("more")


def test_text_after_angle_bracket_waits_for_finish(tokenizer: TextTokenizer) -> None:
    feed = TextFeed(tokenizer)
    feed.feed("say <|im_")
    early = list(feed.committed)
    feed.feed("end|> now and then more words")
    assert feed.committed == early  # held from "<": it may be an added token
    feed.finish()
    assert feed.committed == _whole(tokenizer, "say <|im_end|> now and then more words")


def test_random_strings_random_splits(tokenizer: TextTokenizer) -> None:
    alphabet = list("aAbZz é\u0301ß0129 \t\n\r.,!?'/-<|>你好，。😀") + ["  ", "\n\n", "'s", " the"]
    rng = random.Random(2027)
    failures = []
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        if not text.strip():
            continue
        whole = _whole(tokenizer, text)
        feed = TextFeed(tokenizer)
        for piece in _pieces_by(rng.choice(["char", "random"]), text, rng):
            feed.feed(piece)
            assert feed.committed == whole[: len(feed.committed)], repr(text)
        feed.finish()
        if feed.committed != whole:
            failures.append(repr(text))
    assert not failures, failures[:10]


# ---------------------------------------------------------------- fed rows on the scheduler
FED_TEXTS = ["Hello there, how are you today?", "One two three, four five six seven."]
# ICL: the prefill holds T2 - len(ref_text) = 36 target tokens of this voice; a longer text
LONG = (
    "This is a longer piece of text, spoken in the cloned voice of the reference clip, and it "
    "keeps going for a while so that the request starts before all of it has arrived; then "
    "it waits for every next word, exactly as a language model would send them."
)


def _feed_and_collect(scheduler, voice, text, pieces, kwargs, pause: bool):  # noqa: ANN001
    from .test_batching import collect

    fed = FedRequest(scheduler, voice, **kwargs)
    out: dict = {}
    consumer = threading.Thread(target=lambda: out.setdefault("r", collect(fed.stream)))
    consumer.start()
    for piece in pieces:
        fed.feed(piece)
        if pause:  # the row waits for text: the loop goes idle (no step) before the next piece
            _wait_idle(scheduler, fed)
    _wait_settled(fed)
    assert fed._seq is not None  # it started before the text was done
    fed.done()
    consumer.join(120)
    assert not consumer.is_alive()
    return out["r"]


def _wait_settled(fed: FedRequest) -> None:
    """The consumer (another thread) queued the row once the prompt's text was in: feed hands
    the text over and returns, the consumer waits for it and builds the row."""
    deadline = time.monotonic() + 60
    while not fed.settled:
        assert time.monotonic() < deadline, "the row was never queued"
        time.sleep(0.005)


def _wait_idle(scheduler, fed: FedRequest | None = None) -> None:  # noqa: ANN001
    """The loop has nothing to step (after `fed`, if given, has its text in its row)."""
    if fed is not None:
        _wait_settled(fed)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with scheduler._cond:
            if not scheduler._has_work():
                return
        time.sleep(0.005)
    raise AssertionError("the loop never went idle")


@pytest.mark.parametrize("mode", ["word", "char", "random"])
@pytest.mark.parametrize("clone", ["xvec", "icl"])
def test_fed_text_gives_the_whole_texts_chunks(mode: str, clone: str) -> None:
    from tts_core.backends.qwen3 import served_loop

    from .test_batching import collect, served_model, voices

    model = served_model("qwen3-tiny-a")
    icl, xvec = voices("qwen3-tiny-a")
    voice = icl if clone == "icl" else xvec
    rng = random.Random(mode + clone)
    scheduler = served_loop(model, max_batch=4, prefill_chunk=7)
    try:
        texts = [LONG, LONG + " Again!"] if clone == "icl" else FED_TEXTS
        for i, text in enumerate(texts):
            kwargs = {"max_new_tokens": 64, "seed": 7 + i, "greedy": i == 1}
            whole = collect(scheduler.submit(text, voice, **kwargs))
            pieces = _pieces_by(mode, text, rng)
            fed = _feed_and_collect(scheduler, voice, text, pieces, kwargs, pause=(i == 0))
            assert torch.equal(fed[0], whole[0]), f"{text!r}: codes differ"
            assert np.array_equal(fed[1], whole[1]), f"{text!r}: audio differs"
            assert [c.frames for c in fed[2]] == [c.frames for c in whole[2]]
            assert fed[2][-1].stop_reason == whole[2][-1].stop_reason
        assert scheduler.active == 0
    finally:
        scheduler.close()


def test_a_waiting_row_leaves_the_others_unchanged() -> None:
    """Rows stepping while a fed row waits for text give what they give alone, bit for bit;
    the fed row, paused mid-text while they run, still gives its whole text's chunks."""
    from tts_core.backends.qwen3 import served_loop

    from .test_batching import collect, request, served_model, voices

    model = served_model("qwen3-tiny-a")
    _, xvec = voices("qwen3-tiny-a")
    scheduler = served_loop(model, max_batch=4, prefill_chunk=7)
    try:
        alone = [
            collect(
                scheduler.submit(*request(i, "qwen3-tiny-a")[:2], **request(i, "qwen3-tiny-a")[2])
            )
            for i in (1, 2)
        ]
        text = FED_TEXTS[0]
        kwargs = {"max_new_tokens": 48, "seed": 3}
        whole = collect(scheduler.submit(text, xvec, **kwargs))
        fed = FedRequest(scheduler, xvec, **kwargs)
        fed.feed("Hello there, how ")
        stream = fed.stream
        first = next(stream)  # the fed row is running, then waits for its text
        _wait_idle(scheduler)
        seq = fed._seq
        assert not seq.input_ready and seq.frames == len(fed._feed.committed)
        paused_at = seq.frames
        others = {}

        def run(i: int) -> None:
            t, v, kw = request(i, "qwen3-tiny-a")
            others[i] = collect(scheduler.submit(t, v, **kw))

        threads = [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not seq.input_ready and seq.frames == paused_at  # it waited while they ran
        fed.feed("are you today?")
        fed.done()
        rest = collect(stream)
        for k, i in enumerate((1, 2)):
            assert torch.equal(others[i][0], alone[k][0])
            assert np.array_equal(others[i][1], alone[k][1])
        codes = torch.cat([first.codes, rest[0]])
        audio = np.concatenate([first.audio, rest[1]])
        assert torch.equal(codes, whole[0])
        assert np.array_equal(audio, whole[1])
    finally:
        scheduler.close()
