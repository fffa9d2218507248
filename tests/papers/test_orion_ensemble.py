"""P1 orion: seeds trained side by side (papers.orion.ensemble) are the same computation as separate models
trained one by one with torch's own AdamW and clip_grad_norm_ (an independent path), and training stops at
the accuracy gate."""
import numpy as np
import pytest
import torch

from papers.orion import train as trainer
from papers.orion.ensemble import EnsembleGPT, clip_per_member, decay_groups, init_members
from papers.orion.model import GPTConfig

CFG = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=8)


def test_members_round_trip_and_forward_like_the_plain_gpts():
    models = init_members(CFG, [0, 1, 2])
    ens = EnsembleGPT.from_members(models)
    idx = torch.randint(1, CFG.vocab_size, (3, 4, 10), generator=torch.Generator().manual_seed(0))
    out = ens(idx)
    for e, m in enumerate(models):
        torch.testing.assert_close(out[e], m(idx[e]), atol=1e-5, rtol=1e-5)
        for (name, a), b in zip(m.state_dict().items(), ens.member(e).state_dict().values()):
            assert torch.equal(a, b), name
    assert not torch.equal(models[0].wte.weight, models[1].wte.weight)  # seeds give different initial weights


def test_one_step_equals_separate_adamw_with_per_model_clipping():
    torch.manual_seed(0)
    models = init_members(CFG, [3, 4])
    ens = EnsembleGPT.from_members(models)
    x = torch.randint(1, CFG.vocab_size, (2, 5, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(2, 5, 8, dtype=torch.bool)
    mask[:, :, 3] = mask[:, :, 6] = True
    kw = dict(lr=1e-2, betas=(0.9, 0.95))
    opt = torch.optim.AdamW(decay_groups(ens, 0.1), **kw)
    for _ in range(2):  # two steps, so that the moments matter
        loss = trainer.ensemble_loss(ens, x, mask, lm_weight=0.5)
        opt.zero_grad()
        loss.backward()
        clip_per_member(ens.parameters(), 0.05)  # small: clipping is active
        opt.step()
    for e, m in enumerate(models):
        decay = [q for q in m.parameters() if q.dim() >= 2]
        rest = [q for q in m.parameters() if q.dim() < 2]
        o = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], **kw)
        for _ in range(2):
            loss, _ = trainer.loss_fn(m, x[e], mask[e], lm_weight=0.5)
            o.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)
            o.step()
        for (name, a), b in zip(m.state_dict().items(), ens.member(e).state_dict().values()):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("gate, expect", [(0.5, [3, 6]), (2.0, [7, 7])])
def test_training_stops_each_member_at_the_gate(gate, expect):
    """Member 0 passes at the first record (step 3), member 1 at the second (6); an unreachable gate runs to
    the cap (7, not a multiple of eval_every: the last step is recorded too)."""
    models = init_members(CFG, [0, 1])
    rng = [np.random.default_rng(0), np.random.default_rng(1)]

    def sampler(r):
        def sample(copy_only):
            x = torch.as_tensor(r.integers(1, CFG.vocab_size, (4, 8)))
            return x, torch.ones(4, 7, dtype=torch.bool)
        return sample

    # the held-out accuracy the fake evaluation reports, record by record (member 0, member 1, ...)
    order = iter([{"story": 1.0}, {"story": 0.0}, {"story": 1.0}, {"story": 1.0}, {"story": 1.0}, {"story": 1.0}])
    out, steps, hist = trainer.train_until_gate(models, [sampler(r) for r in rng], max_steps=7, lr=1e-3, warmup=1,
                                                weight_decay=0.0, grad_clip=1.0, lm_weight=0.0, eval_every=3,
                                                evaluate=lambda m: next(order), gate=gate)
    assert steps == expect and all(m is not None for m in out)
    assert hist.groupby("member").step.max().tolist() == expect
