# Hugging Face Docker Space: port 7860, non-root user 1000.
FROM python:3.11-slim

# a C compiler builds the 8-bit CPU kernel (tts_core/models/native) on first use; without it
# the same numbers run on torch's slower int8 matmul
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
WORKDIR $HOME/app

# torch first and pinned (an unpinned torch may pull a newer, multi-GB build); PyPI's Linux
# wheel brings CUDA, which a GPU Space uses; for a CPU-only image point pip at a CPU wheel.
RUN pip install --no-cache-dir --user torch==2.13.0
COPY --chown=user pyproject.toml README.md ./
COPY --chown=user tts_core ./tts_core
RUN pip install --no-cache-dir --user .
COPY --chown=user app.py ./
COPY --chown=user assets ./assets

EXPOSE 7860
CMD ["python", "app.py"]
