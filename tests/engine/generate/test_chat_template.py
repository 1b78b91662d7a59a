"""Bounded chat-template rendering: the same text as transformers for real templates; a hostile template
(endless loops, huge output, its own errors) is refused with one line, in bounded time, and a cancel ends it."""

from __future__ import annotations

import threading
import time

import pytest

from engine.generate.chat_template import TemplateLimits, render_text
from engine.errors import CancelledError, TemplateError
from tests.helpers.tiny_model import build_tiny_tokenizer

HELLO = [{"role": "user", "content": "hi"}]
NESTED_HUGE_RANGES = ("{% for i in range(10**9) %}{% for j in range(10**9) %}{{ j }}{% endfor %}{% endfor %}")
# No call, no output, no lookup inside: 10**15 iterations of plain Python loops after compilation.
NESTED_SILENT_LOOPS = ("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% for k in r %}"
                       "{% endfor %}{% endfor %}{% endfor %}")
# Exactly what transformers supports beyond plain Jinja: {% generation %}, tojson, namespace, dict,
# raise_exception (not reached), loop controls, special-token variables, whitespace control.
RICH = """{{ bos_token }}{% set ns = namespace(n=0) %}
{% for message in messages %}
  {% if message.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}
  {% set ns.n = ns.n + 1 %}
  <|im_start|>{{ message['role'] ~ '\n' }}
  {% if message.role == 'assistant' %}{% generation %}{{ message.content | trim }}{% endgeneration %}
  {% else %}{{ message.content }}{% endif %}<|im_end|>
  {% if loop.last %}{% break %}{% endif %}
{% endfor %}
{{ dict(count=ns.n, roles=messages | map(attribute='role') | list) | tojson }}
{{ '%s|%d' % ('x', 3) }}{{ '{}-{}'.format(1, 2) }}{{ ['a', 'b'] | join(', ') }}{{ 'ab' * 2 }}{{ 2 ** 8 }}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
CONVERSATIONS = [
    HELLO,
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello 秒回 😀 <b>&</b>"},
     {"role": "assistant", "content": "  hi  "}, {"role": "user", "content": "again <|im_end|>"}],
]


@pytest.fixture()
def tok():
    return build_tiny_tokenizer()


def render_with(tok, template: str, conversation=HELLO, **kwargs) -> str:
    tok.chat_template = template
    return render_text(tok, conversation, **kwargs)


def refused(tok, template: str, **kwargs) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(TemplateError) as info:
        render_with(tok, template, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.startswith("this model's chat template"), message
    return message, time.monotonic() - start


@pytest.mark.parametrize("template", ["tiny", "rich"])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_real_templates_render_exactly_as_transformers_does(tok, template, conversation, add_generation_prompt):
    if template == "rich":
        tok.chat_template = RICH
    expected = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert render_text(tok, conversation, add_generation_prompt=add_generation_prompt) == expected


def test_nested_loops_over_huge_ranges_are_refused_at_once(tok):
    message, took = refused(tok, NESTED_HUGE_RANGES)
    assert took < 2 and "1,000,000,000" in message


def test_silent_nested_loops_are_stopped_at_the_deadline(tok):
    # The default limit: the render must end within ~2 s of its 5 s deadline, not run for minutes.
    message, took = refused(tok, NESTED_SILENT_LOOPS)
    assert 4.5 < took < 7 and "took more than 5 s" in message


@pytest.mark.parametrize("template", [
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",  # streamed
    "{% set x %}{% for i in range(100000) %}{{ 'y' * 99 }}{% endfor %}{% endset %}{{ x }}",  # captured block
    "{% macro m() %}{% for i in range(100000) %}{{ 'y' * 99 }}{% endfor %}{% endmacro %}{{ m() }}",
    "{{ 'x' * 10**10 }}",  # one C-level step: refused before it runs
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{{ range(100000) | join('y' * 100000) }}",
    "{{ ('x' * 1000) | replace('', 'y' * 100000) }}",
    "{{ ('x\n' * 1000) | indent(100000) }}",
    "{{ '%999999999s' % 'x' }}",
    "{{ '{:>9999999999}'.format(1) }}",
    "{{ 'x'.ljust(10**10) }}",
    "{{ lipsum(10**6) }}",
])
def test_huge_output_is_refused_quickly_with_one_line(tok, template):
    _message, took = refused(tok, template)
    assert took < 3


def test_the_output_cap_grows_with_the_conversation(tok):
    long = [{"role": "user", "content": "y" * 1_500_000}]
    assert len(render_with(tok, "{{ messages[0].content }}{{ messages[0].content }}", long)) == 3_000_000
    with pytest.raises(TemplateError):  # three copies pass twice the conversation plus 10 of markup
        render_with(tok, "{{ messages[0].content * 3 }}", long, limits=TemplateLimits(base_chars=10))


def test_cancel_ends_a_render_in_progress(tok):
    tok.chat_template = NESTED_SILENT_LOOPS
    cancel = threading.Event()
    outcome: list[BaseException] = []

    def work() -> None:
        try:
            render_text(tok, HELLO, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001  (the test inspects it)
            outcome.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    time.sleep(0.3)
    pressed = time.monotonic()
    cancel.set()
    worker.join(timeout=4)
    assert not worker.is_alive()
    assert time.monotonic() - pressed < 1
    assert len(outcome) == 1 and isinstance(outcome[0], CancelledError)


@pytest.mark.parametrize("template, words", [
    ("{% for x in %}", "syntax error on line 1"),
    ("{{ raise_exception('Conversation roles must alternate\nuser/assistant') }}",
     "refused the conversation: Conversation roles must alternate"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "calls itself too deeply"),
    ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}", "took more than"),
    ("{{ undefined_function() }}", "UndefinedError"),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "sandbox forbids"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "sandbox forbids"),
    ("{% include 'other' %}", "failed"),
])
def test_template_failures_are_one_line(tok, template, words):
    message, _took = refused(tok, template, limits=TemplateLimits(time_s=1.0))
    assert words in message


def test_no_template_or_an_oversized_one_is_refused(tok):
    refused(tok, "x" * 1_000_001)
