"""Stats -> what the page shows: a one-line Markdown summary and the audio-vs-time plot data."""

from __future__ import annotations

from typing import Any

import pandas as pd

PLOT_COLUMNS = ["wall-clock s", "seconds of audio", "series"]


def stats_markdown(stats: dict[str, Any], state: str, hide_notice: str | None = None) -> str:
    """Live stats in three lines, plus this request's notices (not the page-wide one)."""

    def num(key: str, unit: str = " s", digits: int = 3) -> str:
        value = stats.get(key)
        return "–" if value is None else f"{value:.{digits}f}{unit}"

    rtf = stats.get("real_time_factor")
    lines = [
        f"**{state}** · time to first audio **{num('time_to_first_audio_s')}** · "
        f"chunks **{stats.get('chunks', 0)}** · audio **{num('audio_s', digits=2)}** · "
        f"compute **{num('compute_s')}** · real-time factor **{'–' if rtf is None else f'{rtf:.3f}'}**",
        f"last chunk: {_last(stats.get('chunk_compute_s'))} s compute for "
        f"{_last(stats.get('chunk_audio_s'))} s audio · queue wait {num('queue_wait_s')} · "
        f"voice {num('voice_s')}",
        f"`{stats.get('backend')}` · `{stats.get('model')}` · `{stats.get('device')}`"
        + (f" · `{stats['weight_format']}`" if stats.get("weight_format") else ""),
    ]
    lines += [f"⚠️ {n}" for n in stats.get("notices", []) if n != hide_notice]
    return "  \n".join(lines)


def _last(values: list[float] | None) -> str:
    return f"{values[-1]:.3f}" if values else "–"


def timeline_frame(stats: dict[str, Any]) -> pd.DataFrame:
    """Audio produced vs wall-clock time, and where playback would be had it started at the
    first chunk: while "generated" stays above "playback", the listener never waits."""
    rows: list[tuple[float, float, str]] = [(0.0, 0.0, "generated")]
    timeline = stats.get("timeline") or []
    rows += [(float(w), float(a), "generated") for w, a in timeline]
    if timeline:
        start, end = float(timeline[0][0]), float(timeline[-1][0])
        end = max(end, start + float(timeline[-1][1]))  # draw playback to the end of the audio
        rows += [(start, 0.0, "playback"), (end, end - start, "playback")]
    return pd.DataFrame(rows, columns=PLOT_COLUMNS)


def empty_timeline() -> pd.DataFrame:
    rows = [(0.0, 0.0, "generated"), (0.0, 0.0, "playback")]  # both series in the legend
    return pd.DataFrame(rows, columns=PLOT_COLUMNS)
