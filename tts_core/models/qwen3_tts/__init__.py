"""Qwen3-TTS 12 Hz in plain PyTorch (talker, code predictor, codec, speaker encoder)."""
