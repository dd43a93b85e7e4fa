"""dac.model.dac re-exports Snake1d from dac.nn.layers (as the real module does)."""

from dac.nn.layers import Snake1d  # noqa: F401
