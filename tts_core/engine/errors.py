"""Errors whose message is written for the person using the app (shown as-is in the UI and API)."""

from __future__ import annotations

import re

_PATH = re.compile(r"(?<![\w:/.~])(?:~|\.{1,2})?/(?:[^\s'\"/:,()]+/)+([^\s'\"/:,()]*)")


MAX_SHOWN_CHARS = 40  # of a client's value repeated in an error message


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """A client's value as an error message repeats it: at most `limit` characters, a longer one
    cut and its length given (a 100 KB `language` came back whole in its 400)."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class InputError(ValueError):
    """Bad request input: the message says what is wrong and how to fix it.

    `param` names the request field at fault (the API reports it), None when it is no one field.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class BackendError(RuntimeError):
    """The backend failed while synthesizing; the message is safe to show."""


class EngineBusy(RuntimeError):
    """Every slot runs and the waiting line is full: retry after `retry_after_s` seconds."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def redact_paths(text: str) -> str:
    """Server paths in an error shown to visitors -> '…/name' (the log keeps them whole)."""
    return _PATH.sub(lambda m: f"…/{m.group(1)}", text)
