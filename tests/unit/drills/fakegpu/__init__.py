"""The driver stand-in for tests of the isolation probe: ``fakegpu.c`` built as the two libraries the NVIDIA
container runtime mounts into a GPU container (libnvidia-ml.so.1 and libcuda.so.1)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fakegpu.c")
LIBRARIES = ("libnvidia-ml.so.1", "libcuda.so.1")


def compiler() -> str | None:
    """A C compiler on PATH, or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build(out: Path) -> Path:
    """Build both libraries into ``out`` (each with its soname, as the real ones have) and return ``out``."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc or gcc) on PATH")
    out.mkdir(parents=True, exist_ok=True)
    for name in LIBRARIES:
        subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{name}", "-o", str(out / name), str(SOURCE)],
                       check=True, timeout=120)
    return out
