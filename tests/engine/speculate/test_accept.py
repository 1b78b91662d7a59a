"""``engine.speculate.accept.Shaper``: the repetition penalty's ids kept as a buffer across calls (issue 45: a step that
drafts nothing costs what a plain step costs) give the scores a tensor built afresh from each history gives."""

from __future__ import annotations

import torch

from engine.generate.sampling import build_processors
from engine.inputs import SamplingConfig
from engine.speculate.accept import Shaper


def fresh_scores(config: SamplingConfig, logits: torch.Tensor, history: list[int]) -> torch.Tensor:
    scores = logits.float().reshape(1, -1)
    return build_processors(config)(torch.tensor([history], dtype=torch.long), scores)


def test_kept_ids_follow_growing_rewound_and_replaced_histories() -> None:
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.3)
    shaper = Shaper(config, None)
    generator = torch.Generator().manual_seed(0)
    history = [3, 9, 27, 5]
    histories = [history + [11], history + [11, 40], history + [11, 40, 7, 8],  # grown a token, then several
                 history + [11, 2],  # rewound (a rejected draft) and grown otherwise
                 list(range(90, 230)),  # another conversation, past the first buffer's capacity
                 list(range(90, 100)), [1]]  # shorter: a prefix of the last one, then not
    for seen in histories:
        logits = torch.randn(256, generator=generator)
        assert torch.equal(shaper.scores(logits, seen), fresh_scores(config, logits, seen)), seen


def test_scores_leave_the_history_alone_without_a_penalty() -> None:
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0)
    logits = torch.randn(64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(Shaper(config, None).scores(logits, [1, 2, 3]), logits.reshape(1, -1))
