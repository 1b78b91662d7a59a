"""This thread's torch operations on one core: ``serial_here()``, for threads that only sample beside a step thread.

Why: ``engine serve --parallel N`` runs every request on a thread of its own while the batched forward runs on the
engine's thread (engine/serve/batching.py). Each request thread samples its token with torch operations over the
whole vocabulary (an argmax over 49,152 logits is past torch's parallel grain), and torch runs each as an OpenMP
parallel region. GNU OpenMP gives every thread that opens a region a team of its own, and once it manages more
threads than the machine has cores it stops spinning between regions process-wide: the workers of every team then
sleep after each region and are woken for the next. The batched step is hundreds of small regions, so it lost a
third: on a 2-core AMD EPYC, with the model on one thread as ``engine serve`` hosts it, a step of 8 took 23 ms
against 14.5 ms with this module, and 8 clients got 146 against 217 tok/s (docs/BENCHMARK.md, "Serving many at
once"). ``OMP_WAIT_POLICY=PASSIVE`` for the whole process slowed the step's own team instead.

How: torch asks ``omp_get_max_threads()`` of the calling thread for its team size, and that is a per-thread setting
of the OpenMP runtime (torch copies its process-wide count into each thread once, on the thread's first operation).
So after that first copy this module calls the runtime's own ``omp_set_num_threads(1)`` on the calling thread: its
operations then run serially, and no other thread's count changes. ``torch.set_num_threads`` cannot do this: it also
changes the count every thread made later starts from.

Why by hand: torch offers no per-thread count, and the runtime is torch's own copy (torch/lib/libgomp.so.1 in the
Linux wheels), found here by its path among the libraries this process has mapped so the call reaches the runtime
torch uses, never a second copy. Where none is found (another OS, a torch built without OpenMP) nothing changes and
``serial_here`` says so. Owns this one setting; not which threads call it (engine/serve/worker.py decides).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

_RUNTIMES = ("libgomp", "libomp", "libiomp5")  # GNU, LLVM and Intel OpenMP: each exports omp_set_num_threads
_MAPS = Path("/proc/self/maps")


@functools.cache
def _runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime this process has loaded (by its mapped path), or None where none can be found."""
    try:
        lines = _MAPS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)  # address, permissions, offset, device, inode and (where mapped) the path
        name = Path(fields[5].strip()).name if len(fields) == 6 else ""
        if any(name.startswith((kind + ".so", kind + "-")) for kind in _RUNTIMES):
            path = fields[5].strip()
            try:
                runtime = ctypes.CDLL(path)
                runtime.omp_set_num_threads  # noqa: B018  (raises AttributeError where it is not exported)
                return runtime
            except (OSError, AttributeError):
                continue
    return None


def serial_here() -> bool:
    """Make torch's operations on the calling thread run on one core (no OpenMP team); other threads keep theirs.
    Returns whether it took effect (``torch.get_num_threads()`` on this thread is then 1)."""
    torch.get_num_threads()  # the thread's first operation: torch copies its count in now, not over ours later
    runtime = _runtime()
    if runtime is None:
        return False
    runtime.omp_set_num_threads(1)
    return torch.get_num_threads() == 1
