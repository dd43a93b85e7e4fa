"""Qwen3-TTS on the one decode engine (tts_core/serving): its request (sequence.py; fed.py: text
in pieces), its StepModel (runner.py, over the caches of kv_arena.py, or the CUDA graphs of
cuda_graphs.py / static_step.py)."""
