# Hugging Face Docker Space (or any container host): port 7860, non-root user 1000.
#   docker build -t voice-demo .                          CPU image: torch's CPU-only wheel
#   docker build --build-arg TORCH=cuda -t voice-demo .   GPU image: PyPI's wheel with CUDA (the
#                                                         image was 6.5 GB, measured in issue #24)
# Two stages: `build` installs the Python packages and compiles the 8-bit CPU kernels with gcc;
# the final image copies only what they produced (~/.local), so it holds no compiler.

FROM python:3.11-slim AS build

# cpu: torch's CPU-only wheel from TORCH_CPU_INDEX; cuda: PyPI's Linux wheel, which brings the
# CUDA 13 libraries (its driver requirement is that release's: check the host's driver)
ARG TORCH=cpu
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

# gcc builds the 8-bit CPU kernels (tts_core/models/native), here only
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN useradd -m -u 1000 user
USER user
# the kernels of every instruction set of this architecture (x86-64: AVX-512 VNNI, AVX-VNNI,
# AVX2), each named by its source's hash; the app picks the best the CPU runs at start
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    TTS_CORE_NATIVE_PREBUILT=/home/user/.local/lib/tts_core-native
WORKDIR $HOME/app

# torch first and pinned (an unpinned torch may pull a newer, multi-GB build)
RUN case "$TORCH" in \
      cpu) pip install --no-cache-dir --user torch==2.13.0 --index-url "$TORCH_CPU_INDEX" ;; \
      cuda) pip install --no-cache-dir --user torch==2.13.0 ;; \
      *) echo "TORCH must be cpu or cuda, got $TORCH" >&2; exit 1 ;; \
    esac
# the dependencies only: the app runs tts_core from its source beside app.py and assets/ (the
# built-in voices are found relative to it), as `python app.py` does in a checkout
COPY --chown=user pyproject.toml README.md ./
COPY --chown=user tts_core ./tts_core
RUN pip install --no-cache-dir --user . && pip uninstall --yes tts-core
COPY --chown=user docker/native_kernels.py ./docker/native_kernels.py
RUN python docker/native_kernels.py build

FROM python:3.11-slim
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    TTS_CORE_NATIVE_PREBUILT=/home/user/.local/lib/tts_core-native \
    PYTHONUNBUFFERED=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
WORKDIR $HOME/app

# the installed packages and the prebuilt kernels; no compiler comes along
COPY --from=build --chown=user /home/user/.local /home/user/.local
COPY --chown=user tts_core ./tts_core
COPY --chown=user app.py ./
COPY --chown=user assets ./assets
COPY --chown=user docker/entrypoint.sh docker/native_kernels.py ./docker/
# fails the build unless every kernel is found without a compiler and loads here
RUN PYTHONDONTWRITEBYTECODE=1 python docker/native_kernels.py check

EXPOSE 7860
# exec form: the entrypoint execs the app, which is PID 1 and drains on SIGTERM itself
ENTRYPOINT ["./docker/entrypoint.sh"]
CMD ["python", "app.py"]
