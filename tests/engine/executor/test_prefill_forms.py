"""engine/executor/prefill_forms.py: the first long int4 prompt chunk times the kernel and the dense form of its first
products and the faster one takes every tiled int4 weight of the model; the env fixes a form; the native dense weight
is the torch form's bits (tests/engine/quant/test_tiled.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from engine.executor import prefill_forms
from engine.executor.fastpath import FastRunner
from engine.executor.prefill_forms import PROBE_PRODUCTS, PROBE_ROWS, PrefillForms
from engine.native import library as native
from engine.quant.tiled import Int4Q8Linear, pack_int4
from tests.engine.executor.test_families import _qwen2
from tests.helpers.family_models import build_family, load_cpu
from tests.helpers.reference_forward import random_prompt

pytestmark = pytest.mark.skipif(not native.decode_ops(), reason="native library not built or no AVX2")


def _int4(out: int = 48, inp: int = 64) -> Int4Q8Linear:
    torch.manual_seed(out)
    q = torch.randint(0, 16, (out, inp), dtype=torch.uint8)
    scale = torch.rand(out, inp // 32) * 0.01
    codes, scales = pack_int4(q, scale, -8 * scale, 32)
    return Int4Q8Linear(codes, scales, 32, out, inp, torch.bfloat16, native.q8act_isa())


class _Clock:
    """A clock where each form's run takes the seconds given: the kernel's, then the dense form's, per call."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.now = seconds, 0.0

    def __call__(self) -> float:
        return self.now

    def run(self, form: str, value: torch.Tensor) -> torch.Tensor:
        self.now += self.seconds[form]
        return value


@pytest.mark.parametrize("faster", ["kernel", "dense"])
def test_the_faster_form_over_the_probed_products_takes_every_int4_weight(monkeypatch, faster):
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    modules = [_int4(), _int4(64)]
    clock = _Clock({"kernel": 1.0, "dense": 3.0} if faster == "kernel" else {"kernel": 3.0, "dense": 1.0})
    forms = PrefillForms(modules + [torch.nn.Linear(4, 4)], clock=clock)
    kernel_out, dense_out = torch.zeros(1), torch.ones(1)
    assert forms.wants_probe(modules[0], PROBE_ROWS) and not forms.wants_probe(modules[0], PROBE_ROWS - 1)
    for probe in range(PROBE_PRODUCTS):
        assert forms.choice is None
        got = forms.probe(lambda: clock.run("kernel", kernel_out), lambda: clock.run("dense", dense_out), 100)
        assert got is (kernel_out if faster == "kernel" else dense_out)  # the result of the form ahead
    choice = forms.choice
    assert choice is not None and choice.form == faster and choice.rows == 100
    assert (choice.kernel_s, choice.dense_s) == ((4.0, 12.0) if faster == "kernel" else (12.0, 4.0))
    for module in modules:
        assert module.kernel_rows == (sys.maxsize if faster == "kernel" else Int4Q8Linear.kernel_rows)
    assert not forms.wants_probe(modules[0], 1000)  # decided: never timed again


def test_the_env_fixes_the_form_and_nothing_is_timed(monkeypatch):
    module = _int4()
    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "kernel")
    forms = PrefillForms([module])
    assert forms.choice is not None and forms.choice.form == "kernel" and forms.choice.kernel_s is None
    assert module.kernel_rows == sys.maxsize and not forms.wants_probe(module, 1000)
    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "dense")
    PrefillForms([module])
    assert module.kernel_rows == Int4Q8Linear.kernel_rows and "kernel_rows" not in module.__dict__


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    return build_family(tmp_path_factory.mktemp("forms") / "qwen2", _qwen2)


def _prefill(model, prompt: list[int]) -> torch.Tensor:
    runner = FastRunner(model)
    *_, (_done, logits) = runner.prefill(prompt)
    return logits


def test_a_long_prompt_chooses_once_and_then_computes_as_the_chosen_form(qwen2_dir, monkeypatch):
    """Auto: the first long prompt decides; the next prompt's logits are then exactly the fixed form's."""
    model0 = load_cpu(qwen2_dir, "int4")
    prompt = random_prompt(len(model0.tokenizer), 200, seed=3)
    fixed = {}
    for form in ("kernel", "dense"):
        monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, form)
        model = load_cpu(qwen2_dir, "int4").model
        fixed[form] = _prefill(model, prompt)
    torch.testing.assert_close(fixed["kernel"].float(), fixed["dense"].float(), atol=0.3, rtol=0.05)
    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "auto")
    model = load_cpu(qwen2_dir, "int4").model
    _prefill(model, prompt)
    forms = prefill_forms.forms_for(model, None)
    assert forms.choice is not None and forms.choice.kernel_s is not None and forms.choice.dense_s is not None
    assert torch.equal(_prefill(model, prompt), fixed[forms.choice.form])
