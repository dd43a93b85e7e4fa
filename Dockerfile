# Hugging Face Docker Space (or any container host): port 7860, non-root user 1000.
#   docker build -t voice-demo .                          CPU image: torch's CPU-only wheel
#   docker build --build-arg TORCH=cuda -t voice-demo .   GPU image: PyPI's wheel with CUDA (the
#                                                         image was 6.5 GB, measured in issue #24)
FROM python:3.11-slim

# cpu: torch's CPU-only wheel from TORCH_CPU_INDEX; cuda: PyPI's Linux wheel, which brings the
# CUDA 13 libraries (its driver requirement is that release's: check the host's driver)
ARG TORCH=cpu
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

# a C compiler builds the 8-bit CPU kernels (tts_core/models/native) on first use; without it
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

# torch first and pinned (an unpinned torch may pull a newer, multi-GB build)
RUN case "$TORCH" in \
      cpu) pip install --no-cache-dir --user torch==2.13.0 --index-url "$TORCH_CPU_INDEX" ;; \
      cuda) pip install --no-cache-dir --user torch==2.13.0 ;; \
      *) echo "TORCH must be cpu or cuda, got $TORCH" >&2; exit 1 ;; \
    esac
COPY --chown=user pyproject.toml README.md ./
COPY --chown=user tts_core ./tts_core
RUN pip install --no-cache-dir --user .
COPY --chown=user app.py ./
COPY --chown=user assets ./assets
COPY --chown=user docker/entrypoint.sh ./docker/entrypoint.sh

EXPOSE 7860
# exec form: the entrypoint execs the app, which is PID 1 and drains on SIGTERM itself
ENTRYPOINT ["./docker/entrypoint.sh"]
CMD ["python", "app.py"]
