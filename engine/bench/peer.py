"""The benchmark's peer: llama.cpp (the optional ``llama-cpp-python``) greedy on the same GGUF file, in a child.

Owns everything about that peer except its timing: whether it can run here (``installed``, ``gguf_for``), the
CMake flags ``make bench-peer`` builds it with (``cmake_args``, from /proc/cpuinfo's text), the child process
that runs llama.cpp (``python -m engine.bench.peer --serve GGUF``) and the parent's handle on it
(``PeerProcess``), and the one-line notes the report prints when the peer is missing or dies.

llama.cpp runs only in the child: a build compiled for another CPU dies with SIGILL in load or prefill, which
would kill the whole bench in-process; here it kills the child, and ``PeerError`` says how to rebuild. This
module imports neither torch nor llama_cpp, so the child loads no torch and the Makefile can ask for the flags
cheaply. Does not render prompts (the engine's tokenizer does, so both prefill the same ids), does not time
repetitions (``engine.bench.core``) and does not format (``engine.bench.report``); the variant that speaks to
the child is ``engine.bench.variants.LlamaCpp``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Sequence

from engine.fmt import one_line

NAME = "llama.cpp"
INSTALL_HINT = "llama.cpp column: `make bench-peer` installs llama-cpp-python (compiles ~5 min)"
REBUILD_HINT = "rebuild it with `make bench-peer` (GGML_NATIVE=OFF, this CPU's instruction sets named)"

# Always named when the CPU has AVX2: GGML_NATIVE=OFF alone would build for a generic x86-64 and run slowly.
_X86_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON")
# cpuinfo flag -> CMake option, each added only when the CPU has it (kernels use them unguarded at run time).
_AVX512_EXTRAS = {"avx512vbmi": "-DGGML_AVX512_VBMI=ON", "avx512_vbmi": "-DGGML_AVX512_VBMI=ON",
                  "avx512_vnni": "-DGGML_AVX512_VNNI=ON", "avx512_bf16": "-DGGML_AVX512_BF16=ON"}


class PeerError(RuntimeError):
    """The peer could not answer: its child failed to load, reported an error, or died (message: one line)."""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first CPU in a /proc/cpuinfo text (empty when it names none)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cmake_args(cpuinfo: str) -> list[str]:
    """The CMake options ``make bench-peer`` builds llama.cpp with, for the CPU a /proc/cpuinfo text describes.

    Why not llama.cpp's default (``GGML_NATIVE=ON``, i.e. ``-march=native``): on an AVX-512/AMX CPU that build
    died with SIGILL in prefill, and one with the instruction sets named explicitly ran. So: native off,
    AVX2/FMA/F16C on, AVX-512 (with VBMI, VNNI, BF16) only where this CPU has it; AMX is left off. A CPU without
    AVX2 (another architecture, or no flags line) gets no options: llama.cpp's own defaults.
    """
    flags = cpu_flags(cpuinfo)
    if "avx2" not in flags:
        return []
    out = list(_X86_FLAGS)
    if "avx512f" in flags:
        out.append("-DGGML_AVX512=ON")
        out += sorted({option for flag, option in _AVX512_EXTRAS.items() if flag in flags})
    return out


def installed() -> bool:
    """Whether ``llama_cpp`` can be imported, found without importing it (the import loads the native library)."""
    return importlib.util.find_spec("llama_cpp") is not None


def gguf_for(model: str, default: Path | None) -> Path | None:
    """The GGUF file the peer runs for the bench's ``--model``: the file itself, the default model's kept GGUF
    (``default``, from ``engine.models.fetch.default_gguf``), or None (a folder or repo id has no GGUF)."""
    if model == "default":
        return default
    path = Path(model).expanduser()
    return path if path.suffix.lower() == ".gguf" and path.is_file() else None


def crash_note(returncode: int | None, stderr_tail: str) -> str:
    """One line for a child that ended without answering: a signal (SIGILL: a build for another CPU) or an exit."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = " (illegal instruction: a llama.cpp built for another CPU)" if name == "SIGILL" else ""
        return f"llama.cpp peer died with {name}{what}; {REBUILD_HINT}"
    detail = one_line(stderr_tail, max_chars=200) or "no message"
    return f"llama.cpp peer exited with status {returncode} ({detail}); {REBUILD_HINT}"


@dataclass(frozen=True)
class PeerReply:
    """One greedy run in the child; times in seconds from when the child read the request."""

    first_s: float  # request read -> first token sampled (prefill included)
    times: tuple[float, ...]  # when each token was sampled
    ids: tuple[int, ...]


class PeerProcess:
    """The parent's handle on one child serving ``generate`` requests over JSON lines (stdin -> stdout)."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int, python: str = sys.executable) -> None:
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [python, "-m", "engine.bench.peer", "--serve", str(gguf), "--threads", str(threads), "--ctx", str(n_ctx)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1)
        try:
            self.version: str = str(self._receive().get("version"))
        except PeerError:
            self.close()
            raise

    def generate(self, ids: Sequence[int], tokens: int, reuse: bool = False) -> PeerReply:
        """Prefill ``ids`` and sample ``tokens`` greedy tokens. By default the whole prompt is prefilled (no cache
        reuse: a TTFT run). ``reuse``: the cache of the previous request is kept up to the longest prefix the two
        share (llama-cpp-python's prefix match), so asking the same prompt again evaluates only its last token
        before decoding: a decode rate after the same positions, taken without paying the prefill again."""
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"ids": list(ids), "tokens": tokens, "reuse": reuse}) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died()
        reply = self._receive()
        return PeerReply(reply["first_s"], tuple(reply["times"]), tuple(reply["ids"]))

    def close(self) -> None:
        """End the child (closing its input ends its loop) and drop its log."""
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()
        self._stderr.close()

    def _receive(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._died()
        message = json.loads(line)
        if "error" in message:
            raise PeerError(f"llama.cpp peer: {message['error']}")
        return message

    def _died(self) -> None:
        returncode = self._proc.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:]
        raise PeerError(crash_note(returncode, tail[0] if tail else ""))


# ---------------------------------------------------------------------------------------- the child


def _greedy(llm: Any, ids: list[int], tokens: int, reuse: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    times: list[float] = []
    out: list[int] = []
    # reset(): no prefix reuse from the previous request, so the run prefills its whole prompt like the other
    # columns' TTFT runs; without it generate(reset=True) keeps the cached prefix the prompt shares with the last
    # request (PeerProcess.generate's reuse). temp 0 is llama-cpp-python's greedy sampler; no end token stops it.
    if not reuse:
        llm.reset()
    for token in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        times.append(time.perf_counter() - start)
        out.append(int(token))
        if len(out) >= tokens:
            break
    return {"first_s": times[0], "times": times, "ids": out}


def serve(gguf: str, threads: int, n_ctx: int) -> int:
    """The child's loop: load ``gguf``, say ready, answer one JSON request per input line until input ends."""
    # The protocol gets its own copy of stdout; fd 1 then points at stderr, so whatever llama.cpp's C code
    # prints can never land inside a JSON line.
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message) + "\n")

    try:
        import llama_cpp

        llm = llama_cpp.Llama(model_path=gguf, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                              logits_all=False, verbose=False)
    except Exception as exc:  # any failure to import or load is reported, not raised: the parent reads a line
        send({"error": one_line(exc, name_type=True)})
        return 1
    send({"ready": True, "version": getattr(llama_cpp, "__version__", None)})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            send(_greedy(llm, [int(i) for i in request["ids"]], int(request["tokens"]), bool(request.get("reuse"))))
        except Exception as exc:
            send({"error": one_line(exc, name_type=True)})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.peer", description=__doc__.splitlines()[0])
    parser.add_argument("--cmake-args", action="store_true", help="print the CMake options for this CPU, then exit")
    parser.add_argument("--serve", metavar="GGUF", help="run as the bench's child on this GGUF file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args(argv)
    if args.cmake_args:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
        print(" ".join(cmake_args(cpuinfo)))
        return 0
    if args.serve:
        return serve(args.serve, args.threads, args.ctx)
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
