"""The Gradio page and its handlers."""

from .page import build_demo

__all__ = ["build_demo"]
