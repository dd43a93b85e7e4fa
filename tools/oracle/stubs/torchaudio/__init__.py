"""Import-only stub for the oracle environment; the 12 Hz path never calls it."""


def __getattr__(name):
    raise RuntimeError(f"stub module {__name__!r} has no {name!r}: the 12 Hz path must not use it")
