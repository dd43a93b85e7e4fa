"""Audio plumbing: decoding uploads, resampling, crossfades, chunk cadence, int16, ffmpeg."""

from .cadence import Cadence
from .decode import AudioDecodeError, DecodedAudio, decode_reference
from .joiner import ChunkJoiner
from .pcm import SAMPLE_RATE, hann_rise, ms_to_samples, resample, to_int16

__all__ = [
    "SAMPLE_RATE",
    "AudioDecodeError",
    "Cadence",
    "ChunkJoiner",
    "DecodedAudio",
    "decode_reference",
    "hann_rise",
    "ms_to_samples",
    "resample",
    "to_int16",
]
