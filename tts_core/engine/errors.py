"""Errors whose message is written for the person using the app (shown as-is in the UI and API)."""


class InputError(ValueError):
    """Bad request input: the message says what is wrong and how to fix it."""


class BackendError(RuntimeError):
    """The backend failed while synthesizing; the message is safe to show."""
