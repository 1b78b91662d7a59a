"""PyInstaller hook for bitsandbytes, replacing the contributed one: collect only usable native libraries.

The contributed hook collects every ``libbitsandbytes_*`` build (CPU, eight CUDA versions, ROCm, XPU:
~120 MB) whatever torch can drive. Miaohui keeps the CPU library always and a GPU family's libraries
only when this build's torch supports that family (a CPU-only torch cannot load any of them).
Owns nothing but that choice.
"""

from pathlib import Path

from PyInstaller.utils.hooks import collect_dynamic_libs, get_module_attribute


def _torch_version_attr(name: str) -> object:
    try:
        return get_module_attribute("torch.version", name)
    except AttributeError:  # e.g. no ``xpu`` attribute in older torch releases
        return None


def _torch_backends() -> tuple[str, ...]:
    backends = ["cpu"]
    for attr, family in (("cuda", "cuda"), ("hip", "rocm"), ("xpu", "xpu")):
        if _torch_version_attr(attr):
            backends.append(family)
    return tuple(backends)


_BACKENDS = _torch_backends()


def _wanted(path: str, backends: tuple[str, ...]) -> bool:
    """Keep a bitsandbytes native library when it is built for one of ``backends`` (cpu, cuda, rocm, xpu)."""
    name = Path(path).name
    if not name.startswith("libbitsandbytes_"):
        return True
    return name.removeprefix("libbitsandbytes_").startswith(backends)


binaries = [entry for entry in collect_dynamic_libs("bitsandbytes") if _wanted(entry[0], _BACKENDS)]

# bitsandbytes' triton kernels (GPU builds) JIT-compile from source files.
module_collection_mode = "pyz+py"
