"""Import-only stub for the VoxCPM oracle venv.

`voxcpm.model.voxcpm` (the v1 model) imports torchaudio at module level, and `voxcpm/__init__`
imports that module, but the VoxCPM2 path never calls it. Any real use raises.
"""


def __getattr__(name: str) -> object:
    raise RuntimeError(
        f"stub module {__name__!r} has no {name!r}: the VoxCPM2 path must not use it"
    )
