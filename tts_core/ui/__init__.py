"""The Gradio page and its handlers."""

from .page import build_demo
from .serving import serve_page

__all__ = ["build_demo", "serve_page"]
