"""The decode roofline: how close a reply's tokens per second come to what this machine's memory allows.

Decoding one token reads every weight once and the whole KV cache at its current length, so
``tokens/s ≤ memory bandwidth ÷ bytes read per token``. Owns the one home of that arithmetic (``roofline``, the
``Roofline`` figures and their verdict), of the bytes one decode step reads — the weights
(``weights_read_per_token``) and the KV cache at the reply's mean length (``kv_read_per_token``), which
``engine bench``, ``engine chat --json`` and the window all use — of the measured bandwidth kept in the data folder
(``stored_bandwidth``, ``measure_and_store``: measured by ``engine.bench.membw``, stamped with when and under what
load; ``stale_reason`` says when a stored figure no longer stands and is measured again on a quiet machine) and of
"is something else using the CPU?" (``CpuWatch``: other processes' CPU time during the reply, from psutil).

Torch-free at import (``membw`` loads in ``measure_and_store`` only), so the window can read the figures.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from engine.paths import replace_text, state_dir, state_root

BANDWIDTH_FILE = "bandwidth.json"
# Below this share of the measured read bandwidth the decode is held up by something other than memory (Python
# and kernel-launch overhead, small matrix products): "far below the ceiling". Fast paths reach 50-80% here.
BANDWIDTH_BOUND_SHARE = 0.5
# Other processes used at least this share of all the cores while the reply decoded: its speed says more about
# them than about the engine (a reply slowed from 61 to 4.5 tok/s that way was reported as nothing at all).
BUSY_SHARE = 0.25
# A stored bandwidth older than this is measured again (memory, BIOS or kernel settings change over a machine's life).
MAX_AGE_S = 30 * 24 * 3600.0
# How long ``measure_and_store`` watches the machine before re-measuring a stale figure (is it quiet now?).
QUIET_SAMPLE_S = 0.5

VERDICTS = ("bandwidth-bound", "overhead-bound", "machine busy")


@dataclass(frozen=True)
class Roofline:
    """One reply's decode against the memory roofline. Bytes and bytes per second; None where not known."""

    weights_bytes: int  # weight bytes read per decode step
    kv_bytes: int  # KV-cache bytes read per decode step (the cache at its current length)
    tok_s: float | None  # the decode rate (tokens per second)
    bandwidth_bytes_s: float | None  # the device's measured read bandwidth
    others_cpu_share: float | None  # other processes' CPU time ÷ (wall time × cores) during the reply
    bandwidth_measured_at: float | None = None  # when the bandwidth was measured (Unix seconds)
    bandwidth_others_cpu_share: float | None = None  # other processes' share of the cores while it was measured

    @property
    def bytes_per_token(self) -> int:
        return self.weights_bytes + self.kv_bytes

    @property
    def achieved_bytes_s(self) -> float | None:
        return self.bytes_per_token * self.tok_s if self.tok_s else None

    @property
    def ceiling_tok_s(self) -> float | None:
        return self.bandwidth_bytes_s / self.bytes_per_token if self.bandwidth_bytes_s and self.bytes_per_token else None

    @property
    def share(self) -> float | None:
        """Achieved ÷ measured bandwidth (1.0: decoding as fast as memory can be read)."""
        achieved = self.achieved_bytes_s
        return achieved / self.bandwidth_bytes_s if achieved and self.bandwidth_bytes_s else None

    @property
    def verdict(self) -> str | None:
        """``machine busy`` when other processes took the cores, else ``bandwidth-bound`` near the ceiling and
        ``overhead-bound`` far below it; None before there is a rate and a bandwidth."""
        if self.others_cpu_share is not None and self.others_cpu_share >= BUSY_SHARE:
            return "machine busy"
        share = self.share
        if share is None:
            return None
        return "bandwidth-bound" if share >= BANDWIDTH_BOUND_SHARE else "overhead-bound"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``engine chat --json`` prints under ``roofline``."""
        data = asdict(self)
        data.update(bytes_per_token=self.bytes_per_token, achieved_bytes_s=self.achieved_bytes_s,
                    ceiling_tok_s=self.ceiling_tok_s, share=self.share, verdict=self.verdict,
                    bandwidth_measured_utc=utc_text(self.bandwidth_measured_at))
        return data


def utc_text(when: float | None) -> str | None:
    """``when`` (Unix seconds) as ``2026-12-02T16:48:03Z``; None stays None."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)) if when is not None else None


def kv_read_per_token(metrics: Any) -> int:
    """KV-cache bytes one timed decode step reads, on average over a reply so far (``Metrics``: the measured
    ``kv_cache_bytes`` at ``prompt_tokens`` + ``generated_tokens``).

    The decode rate is (n − 1) ÷ (t_n − t_1): the steps that made tokens 2..n. The step making token k attends over
    the prompt's P positions and the k − 1 tokens after them, P + n/2 on average, while the cache measured after
    token n holds P + n − 1 positions (a token is fed back only to make the next one). Pairing the rate with the
    cache's bytes at that mean length is what makes bytes × rate the bandwidth the reply actually streamed."""
    kv = int(getattr(metrics, "kv_cache_bytes", 0) or 0)
    prompt, n = int(getattr(metrics, "prompt_tokens", 0) or 0), int(getattr(metrics, "generated_tokens", 0) or 0)
    held = prompt + n - 1
    if kv <= 0 or n < 2 or held <= 0:
        return kv
    return round(kv * min(1.0, (prompt + n / 2) / held))


def weights_read_per_token(loaded: Any) -> int:
    """Weight bytes one decode step reads: everything but an untied input embedding (of which one row is read)."""
    model = loaded.model
    embed = _tensor_bytes(model.get_input_embeddings())
    head = model.get_output_embeddings()
    # A tied head reads the embedding's bytes anyway (a quantized model's embedding reads the head's int8 table).
    shared = _tensor_bytes(head) if head is not None else {}
    return int(loaded.facts.weights_bytes - sum(n for ptr, n in embed.items() if ptr not in shared))


def _tensor_bytes(module: Any) -> dict[int, int]:
    """The storage address and bytes of every parameter and buffer of ``module`` (a quantized module keeps its
    weights in buffers, and its embedding may wrap the head's table rather than own a ``weight``)."""
    return {t.data_ptr(): t.nbytes for t in (*module.parameters(), *module.buffers()) if t is not None}


# ------------------------------------------------------------------------------------ the measured bandwidth


def _bandwidth_path() -> Path:
    """In ``state_root()``: a scripted run's measurement (a machine busy with its test) never replaces the user's."""
    return state_root() / BANDWIDTH_FILE


def stored_bandwidth(device: str) -> dict[str, Any] | None:
    """The bandwidth measured earlier on ``device`` (``membw.Bandwidth.to_dict()`` plus ``measured_at`` and
    ``others_cpu_share``, the load it was measured under), or None when it never was or the file cannot be read
    (it is then measured again)."""
    try:
        stored = json.loads(_bandwidth_path().read_text(encoding="utf-8"))
        entry = stored.get(device) if isinstance(stored, dict) else None
    except (OSError, ValueError):
        return None
    if isinstance(entry, dict) and isinstance(entry.get("read_bytes_s"), (int, float)) and entry["read_bytes_s"] > 0:
        return entry
    return None


def stale_reason(entry: dict[str, Any] | None, now: float) -> str | None:
    """Why a stored bandwidth should be measured again, or None while it stands: ``missing``; ``load unknown`` (kept
    before the load was kept with it); ``busy`` (other processes used at least ``BUSY_SHARE`` of the cores while it
    was measured: memory shared with them reads slower, and every ceiling and share divided by it is off);
    ``old`` (over ``MAX_AGE_S``, or dated in the future: a clock that moved)."""
    if entry is None:
        return "missing"
    share, at = entry.get("others_cpu_share"), entry.get("measured_at")
    if not isinstance(share, (int, float)):
        return "load unknown"
    if share >= BUSY_SHARE:
        return "busy"
    if not isinstance(at, (int, float)) or not 0 <= now - at <= MAX_AGE_S:
        return "old"
    return None


def better_of(stored: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """What to keep after measuring again: the fresh figure, unless it was taken under load and the stored one was
    not (the stored one is only old; a figure taken under load would stand for the neighbours, not the memory)."""
    def quiet(entry: dict[str, Any]) -> bool:
        share = entry.get("others_cpu_share")
        return isinstance(share, (int, float)) and share < BUSY_SHARE

    return stored if quiet(stored) and not quiet(fresh) else fresh


def others_share_now(seconds: float = QUIET_SAMPLE_S) -> float | None:
    """Other processes' share of the cores over the next ``seconds`` (is the machine quiet enough to measure?)."""
    watch = CpuWatch()
    time.sleep(seconds)
    return watch.others_share()


def measure_and_store(device: str, force: bool = False, others_now: float | None = None) -> dict[str, Any]:
    """The bandwidth of ``device``: the stored one while it stands (``stale_reason``), else measured now and stored
    with when and under what load. A stale figure is measured again only when the machine is quiet now (other
    processes under ``BUSY_SHARE`` of the cores; ``others_now`` that share, watched for ``QUIET_SAMPLE_S`` when not
    given): on a busy machine the stored one is kept, and says when and under what load it was taken. ``force``
    (the user's "Measure again") measures whatever the load, and stamps it, so a figure taken under load is
    measured again later."""
    stored = stored_bandwidth(device)
    if stored is not None and not force:
        if stale_reason(stored, time.time()) is None:
            return stored
        if others_now is None:
            others_now = others_share_now()
        if others_now is not None and others_now >= BUSY_SHARE:
            return stored
    from engine.bench.membw import measure_bandwidth  # torch: only when measuring

    watch = CpuWatch()
    measured = measure_bandwidth(device)
    fresh = {**measured.to_dict(), "measured_at": time.time(), "others_cpu_share": watch.others_share()}
    entry = fresh if stored is None or force else better_of(stored, fresh)
    if entry is stored:
        return stored
    path = state_dir() / BANDWIDTH_FILE
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    kept[device] = entry
    replace_text(path, json.dumps(kept, indent=1))  # a reader never sees half a file
    return entry


# ------------------------------------------------------------------------------------ is the machine busy?


class CpuWatch:
    """Other processes' CPU time since ``start()``: the whole machine's busy time minus this process's."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._cores = psutil.cpu_count() or 1
        self.start()

    @staticmethod
    def _busy(times: Any) -> float:
        return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))

    def _own(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._machine0 = self._busy(psutil.cpu_times())
        self._own0 = self._own()

    def others_share(self) -> float | None:
        """Other processes' CPU seconds ÷ (wall seconds × cores) since ``start()``; None before 50 ms passed."""
        wall = time.monotonic() - self._t0
        if wall < 0.05:
            return None
        others = (self._busy(psutil.cpu_times()) - self._machine0) - (self._own() - self._own0)
        return min(1.0, max(0.0, others / (wall * self._cores)))


def roofline(weights_bytes: int, metrics: Any, bandwidth: dict[str, Any] | float | None,
             others_cpu_share: float | None) -> Roofline:
    """The roofline of a reply from its ``Metrics`` (decode rate; KV bytes read per step: ``kv_read_per_token``)
    and the measured bandwidth: a stored entry (``measure_and_store``: its figure, when and under what load it was
    measured) or bytes per second alone."""
    entry = bandwidth if isinstance(bandwidth, dict) else {"read_bytes_s": bandwidth}
    return Roofline(weights_bytes=int(weights_bytes), kv_bytes=kv_read_per_token(metrics) if metrics is not None else 0,
                    tok_s=getattr(metrics, "decode_tok_s", None), bandwidth_bytes_s=entry.get("read_bytes_s"),
                    others_cpu_share=others_cpu_share, bandwidth_measured_at=entry.get("measured_at"),
                    bandwidth_others_cpu_share=entry.get("others_cpu_share"))
