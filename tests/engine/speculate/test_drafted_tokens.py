"""Which emitted tokens were accepted drafts (``Token.drafted``, the window tints them): exactly the ones
speculation kept, as many as ``Metrics.accepted_tokens`` counts; none without speculation."""

from __future__ import annotations

from engine.events import Finished, Message, Token
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig, SpeculationConfig

REPEAT = "Copy this list exactly: alpha beta gamma delta, alpha beta gamma delta, one two three four five."
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=40, repetition_penalty=1.0)


def events(session: ChatSession, config: SamplingConfig = GREEDY) -> tuple[list[Token], Finished]:
    tokens, finished = [], None
    for event in session.generate([Message("user", REPEAT)], config):
        if isinstance(event, Token):
            tokens.append(event)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    return tokens, finished


def test_accepted_drafts_are_marked(tiny_fp32):
    tokens, finished = events(ChatSession(tiny_fp32, speculation=SpeculationConfig("prompt-lookup")))
    drafted = [t.index for t in tokens if t.drafted]
    assert len(drafted) == finished.metrics.accepted_tokens > 0
    assert not tokens[0].drafted  # the first token comes from the prompt's forward, never from a draft


def test_rejected_drafts_leave_the_correction_unmarked(lively, other_lively_dir):
    spec = SpeculationConfig("draft", draft_model=str(other_lively_dir))
    tokens, finished = events(ChatSession(lively, speculation=spec))
    m = finished.metrics
    assert m.draft_tokens > m.accepted_tokens  # some drafts were rejected here
    assert sum(t.drafted for t in tokens) == m.accepted_tokens


def test_plain_decoding_marks_nothing(tiny_fp32):
    tokens, _ = events(ChatSession(tiny_fp32))
    assert tokens and not any(t.drafted for t in tokens)


def test_a_session_switches_speculation_on_and_off_keeping_its_cache(tiny_fp32):
    """The window's choice changes between replies of one conversation (``ChatSession.set_speculation``)."""
    session = ChatSession(tiny_fp32)
    plain, _ = events(session)
    session.set_speculation(SpeculationConfig("prompt-lookup"))
    tokens, finished = events(session)
    assert [t.token_id for t in tokens] == [t.token_id for t in plain]
    assert finished.metrics.speculation == "prompt-lookup" and finished.metrics.reused_tokens > 0
    session.set_speculation(None)
    tokens, finished = events(session)
    assert finished.metrics.speculation == "" and not any(t.drafted for t in tokens)
