"""TADA (Hume AI, hume-tada 0.1.9; issue #40) in our own PyTorch: the Llama 3 backbone with its
acoustic/duration inputs and the VibeVoice flow-matching head, the codec decoder (local-attention
transformer + DAC-style CNN), read from folders in the released layout (HumeAI/tada-1b-like model
folder, HumeAI/tada-codec-like folder). Served in the app by backends/tada.py (one line in
models/specs.py)."""
