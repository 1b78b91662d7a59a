"""Read a frozen app's ``--self-test`` JSON report and say whether it shows a reply streamed from the bundled model.

Owns that verdict for both scripts that run a packaged Miaohui: ``packaging/self_test_bundle.sh`` (the frozen
folder, in CI) and ``packaging/test_deb.sh`` (the installed .deb). Runs with any Python 3 (no project imports:
the report is plain JSON, and the .deb check may run it with the system's Python).

Usage: ``python packaging/check_self_test.py REPORT.json [EXPECTED_MODEL]``; exit 0 when the report is good,
1 with one line on stderr saying what is missing.
"""

from __future__ import annotations

import json
import sys

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
QUANTIZED = ("int4", "int8")  # engine.inputs.NATIVE_QUANTIZED (no project imports here: see above)


def verdict(report: dict, model: str = DEFAULT_MODEL) -> str | None:
    """None when the self-test streamed a reply from ``model`` with the panel's figures; else what is wrong."""
    checks = report.get("checks") or {}
    if report.get("ok") is not True:
        return f"the self-test did not pass: {report.get('error') or report.get('checks')}"
    if checks.get("reply_streamed") is not True:
        return "no reply was streamed into the window"
    if not report.get("generated_tokens"):
        return "the reply has no tokens"
    if report.get("model") != model:
        return f"the model was {report.get('model')!r}, not the bundled {model!r}"
    if report.get("device") == "cpu" and report.get("precision") in QUANTIZED and report.get("decode_step") != "native":
        # The bundled model at int4/int8 on a CPU always fits the native step (engine/executor/native_step.py): the
        # Python step means a kernel or module was left out of the bundle, or a CPU path regressed.
        return f"the {report.get('precision')} model decoded on the Python step, not the native one: " \
               f"{report.get('decode_step')}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: check_self_test.py REPORT.json [EXPECTED_MODEL]", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        print(f"self-test report {argv[0]} unreadable: {exc}", file=sys.stderr)
        return 1
    print(f"    model {report.get('model')} ({report.get('precision')}, {report.get('device')}, decode step "
          f"{report.get('decode_step')}), load "
          f"{report.get('load_s')} s, ttft {report.get('ttft_s')}, decode {report.get('decode_tok_s')} tok/s, "
          f"{report.get('generated_tokens')} tokens: {str(report.get('reply', ''))[:100]!r}", file=sys.stderr)
    problem = verdict(report, *argv[1:])
    if problem is not None:
        print(f"self-test report: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
