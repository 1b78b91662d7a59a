"""engine/executor/prefill_forms.py: before the first long int4 prompt chunk computes anything, the kernel and the
dense form are timed on random rows and the faster one takes every tiled int4 weight of the model, so every product of
every prompt takes one form; measured again after more long products; the env fixes a form; the native dense weight is
the torch form's bits (tests/engine/quant/test_tiled.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from engine.executor import prefill_forms
from engine.executor.fastpath import FastRunner
from engine.executor.prefill_forms import PROBE_PRODUCTS, RECHECK_AFTER, SWITCH_SHARE, PrefillForms, probe_rows
from engine.native import library as native
from engine.quant.quant import int8_module
from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear, pack_int4
from tests.engine.executor.test_families import _qwen2
from tests.helpers.family_models import build_family, load_cpu
from tests.helpers.reference_forward import random_prompt

PROBE_ROWS_INT4 = Int4Q8Linear.kernel_rows + 1  # no int4 chunk goes dense unmeasured (probe_rows)

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


def _timed(module: Int4Q8Linear, clock: "_Clock", seen: list[tuple[str, torch.Size, torch.dtype]]) -> None:
    """``module.kernel`` as the clock's kernel form, recording what it was given."""
    def kernel(x: torch.Tensor) -> torch.Tensor:
        seen.append(("kernel", x.shape, x.dtype))
        return clock.run("kernel", torch.zeros(x.shape[0], module.out_features, dtype=x.dtype))
    module.kernel = kernel


@pytest.mark.parametrize("faster", ["kernel", "dense"])
def test_the_first_choice_is_made_on_random_rows_and_the_faster_form_takes_every_int4_weight(monkeypatch, faster):
    """Before the first long chunk computes anything, the first PROBE_PRODUCTS int4 weights are timed both ways on
    random rows of that chunk's length: no prompt's products mix forms."""
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    modules = [_int4(48 + 16 * i) for i in range(PROBE_PRODUCTS + 1)]
    clock = _Clock({"kernel": 1.0, "dense": 3.0} if faster == "kernel" else {"kernel": 3.0, "dense": 1.0})
    forms = PrefillForms(modules + [torch.nn.Linear(4, 4)], clock=clock)
    seen: list[tuple[str, torch.Size, torch.dtype]] = []
    for module in modules:
        _timed(module, clock, seen)

    def dense(x: torch.Tensor, module: Int4Q8Linear) -> torch.Tensor:
        seen.append(("dense", x.shape, x.dtype))
        return clock.run("dense", torch.ones(x.shape[0], module.out_features, dtype=x.dtype))

    assert forms.wants_probe(modules[0], PROBE_ROWS_INT4) and not forms.wants_probe(modules[0], PROBE_ROWS_INT4 - 1)
    with pytest.raises(RuntimeError):
        forms.probe(lambda: torch.zeros(1), lambda: torch.ones(1), PROBE_ROWS_INT4)  # no real product before settle
    choice = forms.settle(150, torch.bfloat16, dense)
    assert choice is forms.choice and choice.form == faster and choice.rows == 150 and choice.measured == 1
    assert (choice.kernel_s, choice.dense_s) == ((4.0, 12.0) if faster == "kernel" else (12.0, 4.0))
    want = []
    for i, module in enumerate(modules[:PROBE_PRODUCTS]):  # alternating which form goes first
        pair = [(form, torch.Size((150, module.in_features)), torch.bfloat16) for form in ("kernel", "dense")]
        want += pair if i % 2 == 0 else pair[::-1]
    assert seen == want
    for module in modules:
        assert module.kernel_rows == (sys.maxsize if faster == "kernel" else Int4Q8Linear.kernel_rows)
    assert forms.settle(150, torch.bfloat16, dense) is choice and len(seen) == len(want)  # once
    assert not forms.wants_probe(modules[0], PROBE_ROWS_INT4)


def test_a_model_with_fewer_int4_weights_than_probed_products_still_decides(monkeypatch):
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    module = _int4()
    clock = _Clock({"kernel": 3.0, "dense": 1.0})
    _timed(module, clock, [])
    forms = PrefillForms([module], clock=clock)
    choice = forms.settle(PROBE_ROWS_INT4, torch.bfloat16, lambda x, m: clock.run("dense", x))
    assert choice.form == "dense" and (choice.kernel_s, choice.dense_s) == (3.0, 1.0)


def test_an_int8_weight_is_timed_from_the_first_chunk_its_class_would_send_dense(monkeypatch):
    """int8's class keeps 24 rows on the kernel (engine/quant/linears.py): a 25-row chunk is the first timed, and the
    choice takes int8 weights as int4's (on an AVX2-only EPYC int8 prompts had gone dense unmeasured, 2-4x slower)."""
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    torch.manual_seed(0)
    module = int8_module(torch.randn(48, 64), torch.bfloat16)
    assert isinstance(module, Int8Q8Linear) and probe_rows(module) == Int8Q8Linear.kernel_rows + 1 == 25
    clock = _Clock({"kernel": 1.0, "dense": 3.0})
    _timed(module, clock, [])
    forms = PrefillForms([module, _int4()], clock=clock)
    assert forms.wants_probe(module, 25) and not forms.wants_probe(module, 24)
    choice = forms.settle(25, torch.bfloat16, lambda x, m: clock.run("dense", x))
    assert choice.form == "kernel" and module.kernel_rows == sys.maxsize


def _settled(forms: PrefillForms, clock: "_Clock", module: Int4Q8Linear) -> None:
    _timed(module, clock, [])
    forms.settle(PROBE_ROWS_INT4, torch.bfloat16, lambda x, m: clock.run("dense", x))


def _probe_round(forms: PrefillForms, clock: "_Clock", module: Int4Q8Linear) -> list[torch.Tensor]:
    """One recheck of PROBE_PRODUCTS products (each asked first, as the runner does): the results returned."""
    kernel_out, dense_out = torch.zeros(1), torch.ones(1)
    got = []
    for _ in range(PROBE_PRODUCTS):
        assert forms.wants_probe(module, PROBE_ROWS_INT4)
        got.append(forms.probe(lambda: clock.run("kernel", kernel_out), lambda: clock.run("dense", dense_out), 200))
    return got


def test_the_choice_is_measured_again_after_more_long_products_and_can_change(monkeypatch):
    """A form chosen in a busy moment does not stand for good: after RECHECK_AFTER long int4 products the forms are
    timed again (then after twice as many); meanwhile each product returns the chosen form's result."""
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    module = _int4()
    clock = _Clock({"kernel": 1.0, "dense": 3.0})
    forms = PrefillForms([module], clock=clock)
    _settled(forms, clock, module)
    assert forms.choice is not None and forms.choice.form == "kernel" and module.kernel_rows == sys.maxsize
    clock.seconds = {"kernel": 3.0, "dense": 1.0}  # the machine changed: dense is now faster
    assert not forms.wants_probe(module, PROBE_ROWS_INT4 - 1)  # short products are not counted
    asked = [forms.wants_probe(module, PROBE_ROWS_INT4) for _ in range(RECHECK_AFTER)]
    assert asked == [False] * (RECHECK_AFTER - 1) + [True]
    got = _probe_round(forms, clock, module)
    assert [out.item() for out in got] == [0.0] * PROBE_PRODUCTS  # the chosen form's (the kernel's), until decided
    choice = forms.choice
    assert choice.form == "dense" and choice.measured == 2 and (choice.kernel_s, choice.dense_s) == (12.0, 4.0)
    assert module.kernel_rows == Int4Q8Linear.kernel_rows
    asked = [forms.wants_probe(module, PROBE_ROWS_INT4) for _ in range(2 * RECHECK_AFTER)]
    assert asked == [False] * (2 * RECHECK_AFTER - 1) + [True]  # the next recheck comes after twice as many
    assert [out.item() for out in _probe_round(forms, clock, module)] == [1.0] * PROBE_PRODUCTS
    assert forms.choice.form == "dense" and forms.choice.measured == 3


def test_a_recheck_keeps_the_form_unless_the_other_is_clearly_faster(monkeypatch):
    """The forms round differently: forms within noise of each other must not take turns (a greedy reply would
    change between two requests); the other form takes over only at SWITCH_SHARE of the chosen one's time or less."""
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    module = _int4()
    clock = _Clock({"kernel": 1.0, "dense": 1.1})
    forms = PrefillForms([module], clock=clock)
    _settled(forms, clock, module)
    assert forms.choice.form == "kernel"
    for dense_s, want in ((0.9, "kernel"), (SWITCH_SHARE + 0.01, "kernel"), (SWITCH_SHARE - 0.01, "dense")):
        clock.seconds = {"kernel": 1.0, "dense": dense_s}
        while not forms.wants_probe(module, PROBE_ROWS_INT4):
            pass
        _probe_round(forms, clock, module)
        assert forms.choice.form == want, dense_s


def test_inside_decode_products_nothing_is_timed(monkeypatch):
    monkeypatch.delenv(prefill_forms.PREFILL_FORM_ENV, raising=False)
    module = _int4()
    forms = PrefillForms([module])
    module.kernel_rows = sys.maxsize  # what engine.quant.tiled.decode_products sets: every row on the kernel
    assert not forms.wants_probe(module, 1000)


def test_the_env_fixes_the_form_and_nothing_is_timed(monkeypatch):
    module = _int4()
    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "kernel")
    forms = PrefillForms([module])
    assert forms.choice is not None and forms.choice.form == "kernel" and forms.choice.kernel_s is None
    assert module.kernel_rows == sys.maxsize
    assert not any(forms.wants_probe(module, 1000) for _ in range(4 * RECHECK_AFTER))  # and never again
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


class _Script:
    """A clock whose timed intervals last the given seconds, in the order the forms are run."""

    def __init__(self, durations: list[float]) -> None:
        self.durations, self.now, self.calls = list(durations), 0.0, 0

    def __call__(self) -> float:
        if self.calls % 2:  # an interval's end
            self.now += self.durations.pop(0) if self.durations else 1.0
        self.calls += 1
        return self.now


@pytest.mark.parametrize("precision", ["int4", "int8"])
@pytest.mark.parametrize("chosen", ["kernel", "dense"])
def test_every_product_of_the_first_long_prompt_takes_the_chosen_form(qwen2_dir, monkeypatch, chosen, precision):
    """Auto: the first long prompt's logits are exactly the chosen form's, and so are the next prompt's. The clock
    puts the other form ahead after the first timed product, so a probe that computed the prompt's own products with
    the form ahead at each (the old way) would mix forms in the first prompt."""
    model0 = load_cpu(qwen2_dir, precision)
    prompt = random_prompt(len(model0.tokenizer), 200, seed=3)
    fixed = {}
    for form in ("kernel", "dense"):
        monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, form)
        model = load_cpu(qwen2_dir, precision).model
        fixed[form] = _prefill(model, prompt)
    torch.testing.assert_close(fixed["kernel"].float(), fixed["dense"].float(), atol=0.3, rtol=0.05)
    assert not torch.equal(fixed["kernel"], fixed["dense"])  # else this test could not tell the forms apart
    monkeypatch.setenv(prefill_forms.PREFILL_FORM_ENV, "auto")
    model = load_cpu(qwen2_dir, precision).model
    runner = FastRunner(model)
    forms = prefill_forms.forms_for(model, None)
    first, rest = (1.0, 2.0), (5.0, 1.0)  # (kernel, dense) seconds: kernel ahead after one product, dense after four
    if chosen == "kernel":
        first, rest = first[::-1], rest[::-1]
    # the order the forms run: kernel first on even products, dense first on odd ones
    forms._clock = _Script([*first, *rest[::-1], *rest, *rest[::-1]])
    *_, (_done, logits) = runner.prefill(prompt)
    assert forms.choice is not None and forms.choice.form == chosen and forms.choice.measured == 1
    assert torch.equal(logits, fixed[chosen])
    assert torch.equal(_prefill(model, prompt), fixed[chosen])
