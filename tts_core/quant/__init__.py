"""The shared 8-bit toolkit for every model (it imports no model; models import it):

- linear.py: Int8Linear (int8 weights per output channel, int8 activations per row, exact int32
  sums on the native kernel this CPU runs, models/native, or torch._int_mm) and sqnr_db;
- conv.py: Int8Conv1d, a 1-D conv (stride 1) as Int8Linear over im2col rows, scale per window;
- calibration.py: recording the inputs of a model's projections, SmoothQuant's scale;
- speed.py: `auto`'s load-time speed check, int8 against float on this CPU, cached;
- quantize.py: the flow (decide -> calibrate -> quantize -> check SQNR -> install) and
  Int8Target, what a model declares (its layers, its calibration run, its files);
- store.py: the outcome saved once per checkpoint content, for any model, and `load_int8`.

A model's declaration lives in its own folder (qwen3_tts/quantize.py, chatterbox/quant.py).
"""
