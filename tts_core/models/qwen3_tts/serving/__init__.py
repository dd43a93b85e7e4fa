"""Qwen3-TTS on the one decode engine (tts_core/serving, nano-vllm's engine/ shape): its request
(sequence.py; fed.py: text in pieces), its StepModel (runner.py: `Qwen3Runner`, over the caches
of kv_arena.py, or the CUDA graphs of cuda_graphs.py / static_step.py). The model offers
`runner(max_batch)` and `request(...)` for a served EngineLoop, and steps one request on the
caller's thread for `model.stream` (tts_core.serving.run_alone)."""
