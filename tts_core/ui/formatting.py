"""slot.info() -> the page's model line and notice, as HTML (the page refreshes them while the
model loads; see page.page_state)."""

from __future__ import annotations

from functools import partial
from html import escape
from typing import Any

escape_text = partial(escape, quote=False)  # text nodes: only <, > and & need it


def status_html(info: dict[str, Any]) -> str:
    """One line: which model speaks, or how far its loading has come."""
    status = info["status"]
    if status["status"] == "failed":
        return (
            f'<p class="model-line failed">The model could not be loaded: '
            f"{escape_text(status['error'] or 'see the server log')}.</p>"
        )
    if status["status"] == "falling_back":
        return f'<p class="model-line loading">{escape_text(status["message"])}.</p>'
    if "backend" not in info:  # still loading
        return (
            f'<p class="model-line loading">The model is loading: '
            f"{escape_text(status['message'])}{_load_step(status)}</p>"
        )
    details = [info["model"], info["device"], info.get("weight_format")]
    details = " · ".join(escape_text(str(d)) for d in details if d)
    return (
        f'<p class="model-line">Voice model: <b>{escape_text(info["backend"])}</b> '
        f'<span class="details">{details}</span></p>'
        f'<p class="description">{escape_text(info["description"])}</p>'
    )


# the phases a load goes through, in order (engine/loading.py), for "step k of n"
LOAD_STEPS = ("downloading", "loading", "warming")


def _load_step(status: dict[str, Any]) -> str:
    """' (step 2 of 3) ' and, while downloading with a known size, a bar of the bytes: a bar
    only where it measures something (a full bar during the load's other steps said nothing)."""
    phase = status["status"]
    if phase not in LOAD_STEPS:
        return ""
    step = f' <span class="phase">(step {LOAD_STEPS.index(phase) + 1} of {len(LOAD_STEPS)})</span>'
    fraction = status.get("progress")
    if phase != "downloading" or fraction is None:
        return step
    return f'{step} <progress max="1" value="{fraction:.3f}"></progress>'


def notice_html(info: dict[str, Any]) -> str:
    """The engine's plain-language notice (what happened, what you hear instead, how to get
    the real voice), its raw error folded away; empty when there is none."""
    if not info.get("notice"):
        return ""
    details = info.get("notice_details")
    folded = (
        f"<details><summary>Details</summary><pre>{escape_text(details)}</pre></details>"
        if details
        else ""
    )
    return f'<div class="notice" role="status"><p>{escape_text(info["notice"])}</p>{folded}</div>'
