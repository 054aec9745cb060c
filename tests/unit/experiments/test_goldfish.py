"""The goldfish loss (experiments/lm/goldfish.py): which tokens it drops, and that it drops nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ROOT, examples, require_training
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)

H = 13


def _tokens(rows: int, seq: int, vocab: int = 512, seed: int = 0):
    import torch

    return torch.randint(0, vocab, (rows, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("k", [2, 4, 16])
def test_drops_about_one_in_k_and_never_the_first_h(k):
    require_training()
    from experiments.lm import goldfish

    kept = goldfish.mask(_tokens(64, 512), k, H)
    assert kept.dtype.is_floating_point is False and kept.shape == (64, 512)
    assert kept[:, :H].all()  # fewer than h tokens before them: no window to hash
    dropped = 1 - kept[:, H:].float().mean().item()
    assert dropped == pytest.approx(1 / k, rel=0.15)


@settings(max_examples=examples(40), deadline=None)
@given(
    tokens=st.lists(st.integers(0, 50_000), min_size=H + 1, max_size=80),
    k=st.integers(2, 6),
    h=st.integers(1, 16),
)
def test_decision_depends_only_on_the_h_tokens_before(tokens, k, h):
    """Any position's decision equals the one for its h preceding tokens alone, wherever they occur."""
    require_training()
    import torch

    from experiments.lm import goldfish

    sequence = torch.tensor(tokens)
    kept = goldfish.mask(sequence, k, h)
    for i in range(h, len(tokens)):
        alone = goldfish.mask(torch.cat([sequence[i - h : i], torch.tensor([0])]), k, h)
        assert kept[i] == alone[h], i
        # The token itself plays no part: only what comes before it.
        other = goldfish.mask(torch.cat([sequence[i - h : i], torch.tensor([tokens[i] + 1])]), k, h)
        assert other[h] == alone[h]


def test_a_changed_token_moves_only_the_next_h_decisions():
    require_training()
    from experiments.lm import goldfish

    tokens = _tokens(1, 400)
    changed = tokens.clone()
    changed[0, 200] += 1
    differ = (goldfish.mask(tokens, 4, H) != goldfish.mask(changed, 4, H)).nonzero()[:, 1].tolist()
    assert differ and all(200 < i <= 200 + H for i in differ)


def test_same_mask_for_a_row_in_any_batch_and_in_another_process():
    """What every rank (another process) and a resumed run (a later process) compute for the same tokens."""
    require_training()
    import torch

    from experiments.lm import goldfish

    tokens = _tokens(8, 300)
    batch = goldfish.mask(tokens, 5, H)
    assert torch.equal(batch, torch.stack([goldfish.mask(row, 5, H) for row in tokens]))
    assert torch.equal(batch, goldfish.mask(tokens.flip(0), 5, H).flip(0))
    code = (
        "import torch; from experiments.lm import goldfish;"
        "t = torch.randint(0, 512, (8, 300), generator=torch.Generator().manual_seed(0));"
        "print(''.join('1' if x else '0' for x in goldfish.mask(t, 5, 13).flatten().tolist()))"
    )
    other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert other == "".join("1" if x else "0" for x in batch.flatten().tolist())


def test_loss_counts_exactly_the_kept_tokens():
    require_training()
    import torch
    import torch.nn.functional as F

    from experiments.lm import goldfish

    targets = _tokens(4, 64, vocab=32)
    logits = torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    kept = goldfish.mask(targets, 3, H)
    assert 0 < (~kept).sum() < kept.numel()
    per_token = F.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1), reduction="none").view(4, 64)
    loss = goldfish.loss(logits, targets, 3, H)
    assert loss.item() == pytest.approx(per_token[kept].mean().item(), rel=1e-6)
    loss.backward()
    touched = logits.grad.abs().sum(dim=-1) > 0
    assert torch.equal(touched, kept)  # no gradient reaches a dropped token, every kept one gets some


@pytest.mark.parametrize("k", [None, 0])
def test_disabled_loss_is_the_plain_cross_entropy(k):
    require_training()
    import torch
    import torch.nn.functional as F

    from experiments.lm import goldfish

    targets = _tokens(4, 64, vocab=32)
    logits = torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(1))
    assert goldfish.mask(targets, k, H).all()
    assert torch.equal(goldfish.loss(logits, targets, k, H), F.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1)))


@pytest.mark.parametrize(("k", "h", "match"), [(1, H, "at least 2"), (-3, H, "at least 2"), (4, 0, "at least 1 token")])
def test_settings_that_make_no_goldfish_loss_are_refused(k, h, match):
    require_training()
    from experiments.lm import goldfish

    with pytest.raises(ValueError, match=match):
        goldfish.mask(_tokens(1, 40), k, h)
