"""Put eSpeak NG's waveform generator back to its fresh state before each synthesis.

eSpeak NG (src/libespeak-ng/wavegen.c, 1.52) keeps waveform state in C statics that no API call
resets, so the same text comes out differently on every call in a process:

- `Flutter_ix`, a static inside `AdvanceParameters()`: the phase of the pitch-flutter table. It
  advances every 64 samples and only wraps, so each synthesis starts at another pitch wobble and
  even its length changes (23190, 23193, 23208, ... samples for "Hello world." with en-us).
- `cycle_count`, a static inside `Wavegen()`: glottal cycles counted for the roughness
  modulation (`if ((cycle_count % modn_period) == 0)`); without it en-us alternates between two
  outputs even with the flutter reset.
- `agc`, a static inside `Wavegen()`: the gain lowered after a clipped sample and raised by one
  step every 8 samples, so a loud synthesis starts the next one quieter.
- `rbreath`, the breath-noise resonators (voices with `breath`, e.g. the `+f3` variant); they are
  reset when a voice is loaded, restored here too in case eSpeak keeps the voice loaded.
- `espeak_rand_state` (common.c), the breath noise's generator; this one has an API,
  `espeak_ng_SetRandSeed` (without it `+f3` varies).

Wavegen's other statics (`maxh`, `maxh2`, `hswitch`, `h_switch_sign`, `amplitude2`) are set
again at each synthesis's first sample (`samplecount == 0`), and measured not to carry anything.

The statics are found by name in the library's ELF symbol table (the wheel's library is not
stripped; the compiler adds a ".NNNN" suffix to function-local statics) and snapshot right after
`espeak_Initialize`, when no synthesis has moved them; `restore()` copies the snapshot back. With
`espeak_ng_SetRandSeed` that makes every synthesis of one text with one voice and parameters the
same samples, the ones a fresh process gives.
"""

from __future__ import annotations

import ctypes
import logging
import struct

log = logging.getLogger(__name__)

WAVEGEN_STATICS = ("Flutter_ix", "cycle_count", "agc", "rbreath")
ANCHOR = "espeak_Synth"  # an exported function: its address minus its symbol value = load base
NOISE_SEED = 1  # the seed eSpeak NG's own command line uses for reproducible output

_SHT_SYMTAB = 2
_KINDS = (1, 2)  # STT_OBJECT, STT_FUNC
_SECTION = struct.Struct("<IIQQQQIIQQ")  # ELF64 section header
_SYMBOL = struct.Struct("<IBBHQQ")  # ELF64 symbol: name, info, other, shndx, value, size


def elf_symbols(path: str) -> dict[str, list[tuple[int, int]]]:
    """{name: [(value, size), ...]} of the ELF64 .symtab's data objects and functions.

    The ".NNNN" suffix of function-local statics is dropped, so a name can have several entries.
    """
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}  # not a little-endian ELF64 file
    shoff, shentsize, shnum = (
        struct.unpack_from("<Q", data, 0x28)[0],
        *struct.unpack_from("<HH", data, 0x3A),
    )
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    symbols: dict[str, list[tuple[int, int]]] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_SYMTAB:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name_at, st_info, _other, _shndx, value, sym_size = _SYMBOL.unpack_from(data, at)
            if st_info & 0xF not in _KINDS:
                continue
            name = data[strings + name_at : data.index(b"\0", strings + name_at)].decode()
            symbols.setdefault(name.split(".")[0], []).append((value, sym_size))
    return symbols


class WavegenState:
    """The snapshot of the wavegen statics; `restore()` before each espeak_Synth (under the lock)."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._set_seed = getattr(lib, "espeak_ng_SetRandSeed", None)  # eSpeak NG >= 1.51
        if self._set_seed is not None:
            self._set_seed.argtypes = [ctypes.c_long]
        self._regions = self._locate(lib, path)
        self._snapshot = [ctypes.string_at(address, size) for address, size in self._regions]

    @staticmethod
    def _locate(lib: ctypes.CDLL, path: str) -> list[tuple[int, int]]:
        symbols = elf_symbols(path)
        unknown = [n for n in (ANCHOR, *WAVEGEN_STATICS) if len(symbols.get(n, ())) != 1]
        if unknown:  # a stripped or different build: no way to find the state
            log.warning("libespeak-ng: no single symbol %s; its audio varies call to call", unknown)
            return []
        located = {name: symbols[name][0] for name in (ANCHOR, *WAVEGEN_STATICS)}
        base = ctypes.cast(getattr(lib, ANCHOR), ctypes.c_void_p).value - located[ANCHOR][0]
        return [(base + located[name][0], located[name][1]) for name in WAVEGEN_STATICS]

    @property
    def complete(self) -> bool:
        return bool(self._regions) and self._set_seed is not None

    def restore(self) -> None:
        for (address, size), saved in zip(self._regions, self._snapshot, strict=True):
            ctypes.memmove(address, saved, size)
        if self._set_seed is not None:
            self._set_seed(NOISE_SEED)
