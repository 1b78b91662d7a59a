"""The torch thread counts of the calling thread, as the lab reports them (``engine lab``'s results.json and the
window's lab, so ``python -m app.lab_bench`` can show both sides ran with the same threads).

Intra-op threads are per calling thread in OpenMP builds (a worker thread may see another count than the main
thread), inter-op threads are per process. Owns the reading only; torch loads on the first call.
"""

from __future__ import annotations


def thread_counts() -> dict[str, int]:
    """``{"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}`` on this thread."""
    import torch  # lazy: importing the lab loads no torch (the GUI imports it at start-up)

    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
