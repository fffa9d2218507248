"""P1 orion: seeds trained side by side (papers.orion.ensemble) are the same computation as separate models
trained one by one with torch's own AdamW and clip_grad_norm_ (an independent path), and training stops at
the accuracy gate."""
import numpy as np
import pytest
import torch

from papers.orion import train as trainer
from papers.orion.ensemble import EnsembleGPT, _gpt_names, clip_per_member, decay_groups, init_members
from papers.orion.model import GPTConfig

CFG = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=8)
WINDOWED = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=8, kv_window=3)
KEYS_ONLY = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=8, kv_window=3, value_layers=1)
ROUTED = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=8, request_markers=(5, 7))


def _members(cfg, seeds):
    """init_members, with the window's mixing weights moved off their identity init (every tap exercised)."""
    models = init_members(cfg, seeds)
    with torch.no_grad():
        for m in models:
            for blk in m.blocks:
                if blk.attn.kv_mix is not None:
                    blk.attn.kv_mix.normal_()
    return models


@pytest.mark.parametrize("cfg", [CFG, WINDOWED, KEYS_ONLY, ROUTED], ids=["plain", "kv_window", "values_in_block_1", "routed"])
def test_members_round_trip_and_forward_like_the_plain_gpts(cfg):
    models = _members(cfg, [0, 1, 2])
    ens = EnsembleGPT.from_members(models)
    idx = torch.randint(1, cfg.vocab_size, (3, 4, 10), generator=torch.Generator().manual_seed(0))
    out = ens(idx)
    for e, m in enumerate(models):
        torch.testing.assert_close(out[e], m(idx[e]), atol=1e-5, rtol=1e-5)
        for (name, a), b in zip(m.state_dict().items(), ens.member(e).state_dict().values()):
            assert torch.equal(a, b), name
    assert not torch.equal(models[0].wte.weight, models[1].wte.weight)  # seeds give different initial weights


@pytest.mark.parametrize("cfg", [CFG, WINDOWED, KEYS_ONLY, ROUTED], ids=["plain", "kv_window", "values_in_block_1", "routed"])
def test_one_step_equals_separate_adamw_with_per_model_clipping(cfg):
    torch.manual_seed(0)
    models = _members(cfg, [3, 4])
    ens = EnsembleGPT.from_members(models)
    x = torch.randint(1, cfg.vocab_size, (2, 5, 9), generator=torch.Generator().manual_seed(1))
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
        decay = [q for n, q in m.named_parameters() if q.dim() >= 2 and "kv_mix" not in n]  # no decay on the window
        rest = [q for n, q in m.named_parameters() if q.dim() < 2 or "kv_mix" in n]
        o = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], **kw)
        for _ in range(2):
            loss, _ = trainer.loss_fn(m, x[e], mask[e], lm_weight=0.5)
            o.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)
            o.step()
        for (name, a), b in zip(m.state_dict().items(), ens.member(e).state_dict().values()):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


# Validation accuracy per record (steps 3, 6, 9 and the cap 10): member 0 1, 0, 1, 1; member 1 0, 1, 1, 1. The fake
# evaluation answers the members still training, in order, record by record.
@pytest.mark.parametrize("gate, records, answers, expect", [
    (0.5, 1, [1.0, 0.0, 1.0], [3, 6]),  # each at its first record at the gate
    (0.5, 2, [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], [10, 9]),  # two in a row: member 0's pass at 3 is followed by a miss
    (2.0, 1, [0.0] * 8, [10, 10]),  # an unreachable gate runs to the cap (10, not a multiple of eval_every)
])
def test_training_stops_each_member_at_the_gate(gate, records, answers, expect):
    models = init_members(CFG, [0, 1])
    rng = [np.random.default_rng(0), np.random.default_rng(1)]

    def sampler(r):
        def sample(copy_only):
            x = torch.as_tensor(r.integers(1, CFG.vocab_size, (4, 8)))
            return x, torch.ones(4, 7, dtype=torch.bool)
        return sample

    order = iter(answers)
    out, steps, hist, _ = trainer.train_until_gate(models, [sampler(r) for r in rng], max_steps=10, lr=1e-3, warmup=1,
                                                weight_decay=0.0, grad_clip=1.0, lm_weight=0.0, eval_every=3,
                                                evaluate=lambda m: {"story": next(order)}, gate=gate,
                                                gate_records=records)
    assert steps == expect and all(m is not None for m in out)
    assert hist.groupby("member").step.max().tolist() == expect
    assert next(order, None) is None  # every answer was asked for: no record skipped, none extra


def test_a_member_left_behind_trains_as_it_would_alone():
    """Member 0 is taken at the first record and training goes on without it: member 1 ends with the weights it gets
    when trained alone from the same start on the same batches (the moments and step count carried over)."""
    def sampler(seed):
        r = np.random.default_rng(seed)

        def sample(copy_only):
            x = torch.as_tensor(r.integers(1, CFG.vocab_size, (4, 8)))
            mask = torch.zeros(4, 7, dtype=torch.bool)
            mask[:, [3, 6]] = True  # answers; the next-token loss (lm_weight) on the rest
            return x, mask
        return sample

    kw = dict(max_steps=8, lr=1e-2, warmup=2, weight_decay=0.1, grad_clip=0.05, lm_weight=0.5, eval_every=3, gate=0.5)
    both = iter([1.0, 0.0, 0.0, 0.0])  # member 0 passes at step 3; member 1 never
    out, steps, _, _ = trainer.train_until_gate(init_members(CFG, [0, 1]), [sampler(0), sampler(1)],
                                             evaluate=lambda m: {"story": next(both)}, **kw)
    alone, alone_steps, _, _ = trainer.train_until_gate(init_members(CFG, [1]), [sampler(1)],
                                                     evaluate=lambda m: {"story": 0.0}, **kw)
    assert steps == [3, 8] and alone_steps == [8]
    for (name, a), b in zip(out[1].state_dict().items(), alone[0].state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def _ragged_batch(seed: int, lengths: list[int], T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of the given lengths right-padded with id 0 to T, answers marked at two positions of each."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(len(lengths), T, dtype=torch.long)
    mask = torch.zeros(len(lengths), T - 1, dtype=torch.bool)
    for i, n in enumerate(lengths):
        x[i, :n] = torch.randint(1, CFG.vocab_size, (n,), generator=g)
        mask[i, [n // 2 - 1, n - 2]] = True
    return x, mask


@pytest.mark.parametrize("multiple", [1, 8])
@pytest.mark.parametrize("buckets", [1, 2, 3, 6])
def test_length_buckets_give_the_padded_batch_loss_and_gradient(buckets, multiple):
    """Cutting a step's batches into parts by length, each member padded on its own (less padding), is the same
    loss, and the same gradient, as one batch padded to its longest sequence: padding follows each sequence and
    attention is causal."""
    batches = [_ragged_batch(0, [3, 11, 5, 16, 8, 4], 16), _ragged_batch(1, [9, 4, 14, 6, 3, 12], 14)]
    grads = []
    for split in (False, True):
        ens = EnsembleGPT.from_members(init_members(CFG, [5, 6]))
        if split:
            parts = trainer.length_buckets(batches, buckets, multiple)
            seen = {}  # member -> sequences in its parts
            for rows, x, _ in parts:
                for e, xe in zip(rows.tolist(), x):
                    seen[e] = seen.get(e, 0) + xe.shape[0]
                    longest = int((xe != 0).sum(-1).max())
                    assert xe.shape[1] == -(-longest // multiple) * multiple  # its own length, rounded up
            assert seen == {0: 6, 1: 6}
            loss = trainer.bucketed_loss(ens, parts, lm_weight=0.5)
        else:
            loss = trainer.ensemble_loss(ens, *trainer.pad_stack(batches), lm_weight=0.5)
        loss.backward()
        grads.append((loss.detach(), [q.grad.clone() for q in ens.parameters()]))
    (l0, g0), (l1, g1) = grads
    torch.testing.assert_close(l1, l0, atol=1e-6, rtol=1e-5)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    if buckets == 6 and multiple == 1:  # one sequence per part: each member's sequences, shortest first
        lengths = {}
        for rows, x, _ in trainer.length_buckets(batches, 6, 1):
            for e, xe in zip(rows.tolist(), x):
                lengths.setdefault(e, []).append(int((xe != 0).sum()))
        assert lengths == {0: [3, 4, 5, 8, 11, 16], 1: [3, 4, 6, 9, 12, 14]}


def _real_sampler(seed: int):
    """Batches of the shared-pool story with copy sequences (the default recipe's sampler, small)."""
    from papers.orion import tasks

    voc = tasks.build_vocab([f"w{chr(97 + i)}{chr(97 + j)}" for i in range(8) for j in range(8)], pool_size=8,
                            numbers=8, seed=0)
    fam = tasks.FAMILIES["story"]
    train_styles, _ = tasks.split_styles(fam, 0.25, 0)
    r = np.random.default_rng(seed)
    return voc, lambda copy_only: trainer.sample_batch([fam], {"story": train_styles}, voc, r, batch_size=8,
                                                       max_requests=3, copy_fraction=0.25, copy_length=(2, 6),
                                                       copy_separated=1.0)


def test_a_seed_trains_the_same_alone_and_in_a_stack():
    """Issue 47's fourth review: seed k's training must not depend on which seeds share its stack. Seed 1 trained
    alone and as the middle member of a stack of 3 (whose other members draw other batches, of other lengths) has the
    same loss curve and ends with the same weights, bit for bit on one CPU thread (float tolerance would not tell:
    the differences of a shared padding start at a few ulps and grow over thousands of steps). With one length for
    the whole stack (the padding before this change) its batches were padded to the other members' longest
    sequences, and its loss curve differed here in the last bits."""
    voc, _ = _real_sampler(0)
    cfg = GPTConfig(vocab_size=len(voc), block_size=160, n_layer=2, n_head=2, n_embd=16)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the train jobs (threads: 1)
    try:
        _stack_and_alone(cfg)
    finally:
        torch.set_num_threads(threads)


def _stack_and_alone(cfg):
    kw = dict(max_steps=6, lr=5e-3, warmup=2, weight_decay=0.1, grad_clip=1.0, lm_weight=0.1, eval_every=1,
              gate=2.0, buckets=2)  # an unreachable gate: every member trains every step, a record each step
    stack, _, hist3, _ = trainer.train_until_gate(init_members(cfg, [10, 11, 12]), [_real_sampler(s)[1] for s in (0, 1, 2)],
                                               evaluate=lambda m: {"story": 0.0}, **kw)
    alone, _, hist1, _ = trainer.train_until_gate(init_members(cfg, [11]), [_real_sampler(1)[1]],
                                               evaluate=lambda m: {"story": 0.0}, **kw)
    curve3 = hist3[hist3.member == 1]["train/loss"].to_numpy()
    curve1 = hist1[hist1.member == 0]["train/loss"].to_numpy()
    assert len(curve1) == 6
    np.testing.assert_array_equal(curve3, curve1)
    assert not np.allclose(hist3[hist3.member == 0]["train/loss"], curve1)  # the stack's other members differ
    for (name, a), b in zip(stack[1].state_dict().items(), alone[0].state_dict().values()):
        assert torch.equal(a, b), name


def _answers_sampler(seed):
    r = np.random.default_rng(seed)

    def sample(copy_only):
        x = torch.as_tensor(r.integers(1, CFG.vocab_size, (4, 8)))
        mask = torch.zeros(4, 7, dtype=torch.bool)
        mask[:, [3, 6]] = True
        return x, mask
    return sample


def test_post_gate_steps_train_exactly_n_more_steps_and_the_analysed_model_is_the_post_gate_one():
    """Issue 47's sixth review: a seed is analysed post_gate_steps after its gate. Member 0 passes at the record of
    step 3 and is taken at 3 + 4 = 7, past no record of eval_every (7 is not a multiple of 3); member 1 never passes
    and is taken at the cap 8 (no post-gate steps: it has no gate). The analysed model of member 0 has the weights of
    member 0 trained alone for exactly 7 steps (not 6, not 8: each step moves the weights), its at-gate model those
    after 3; the history marks the records after the gate, including the one at 7 (the stability premise)."""
    kw = dict(lr=1e-2, warmup=2, weight_decay=0.1, grad_clip=0.05, lm_weight=0.5, eval_every=3, gate=0.5)
    # records: step 3 (members 0, 1), 6 (both: 0 is past its gate), 7 (member 0's post-gate end), 8 (member 1's cap)
    answers = iter([1.0, 0.0, 0.2, 0.0, 0.95, 0.0])
    out, steps, hist, at_gate = trainer.train_until_gate(
        init_members(CFG, [0, 1]), [_answers_sampler(0), _answers_sampler(1)], max_steps=8, post_gate_steps=4,
        evaluate=lambda m: {"story": next(answers)}, **kw)
    assert next(answers, None) is None  # no record skipped, none extra
    assert steps == [7, 8]
    assert [(s, passed) for _, s, passed in at_gate] == [(3, True), (8, False)]
    assert at_gate[1][0] is out[1]  # below the gate: the cap model is both
    rows = hist[hist.member == 0]
    assert rows.step.tolist() == [3, 6, 7] and rows.phase.tolist() == ["gate", "post_gate", "post_gate"]
    assert rows["eval/story"].iloc[-1] == 0.95  # the record at the analysed checkpoint
    assert hist[hist.member == 1].phase.eq("gate").all()

    def alone(n):  # member 0 trained alone for n steps (an unreachable gate: taken at the cap n)
        models, _, _, _ = trainer.train_until_gate(init_members(CFG, [0]), [_answers_sampler(0)], max_steps=n,
                                                   evaluate=lambda m: {"story": 0.0}, **kw)
        return models[0].state_dict()

    def same(a, b):
        return all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(a.values(), b.values()))

    post, gate = out[0].state_dict(), at_gate[0][0].state_dict()
    assert same(post, alone(7)) and not same(post, alone(6)) and not same(post, alone(8))
    assert same(gate, alone(3)) and not same(gate, post)


def test_post_gate_steps_may_run_past_the_cap_and_zero_is_the_gate():
    """The cap bounds the search for the gate, not the post-gate steps: a member that passes at the cap's record
    trains post_gate_steps past it; with post_gate_steps 0 the analysed model is the at-gate one."""
    kw = dict(lr=1e-2, warmup=2, weight_decay=0.1, grad_clip=0.05, lm_weight=0.5, eval_every=3, gate=0.5, max_steps=6)
    answers = iter([0.0, 1.0, 1.0, 1.0])  # passes at step 6, the cap; records at 9 (eval_every) and 6 + 5 = 11
    out, steps, hist, at_gate = trainer.train_until_gate(init_members(CFG, [0]), [_answers_sampler(0)],
                                                         post_gate_steps=5, evaluate=lambda m: {"story": next(answers)},
                                                         **kw)
    assert steps == [11] and at_gate[0][1:] == (6, True) and hist.step.tolist() == [3, 6, 9, 11]
    assert next(answers, None) is None
    answers = iter([1.0])
    out, steps, _, at_gate = trainer.train_until_gate(init_members(CFG, [0]), [_answers_sampler(0)], post_gate_steps=0,
                                                      evaluate=lambda m: {"story": next(answers)}, **kw)
    assert steps == [3] and at_gate[0][0] is out[0]
    with pytest.raises(ValueError, match="post_gate_steps"):
        trainer.train_until_gate(init_members(CFG, [0]), [_answers_sampler(0)], post_gate_steps=-1,
                                 evaluate=lambda m: {"story": 0.0}, **kw)


@pytest.mark.parametrize("cfg", [CFG, WINDOWED, KEYS_ONLY, ROUTED], ids=["plain", "kv_window", "values_in_block_1", "routed"])
def test_the_fast_forward_is_the_reference_forward_bit_for_bit(cfg):
    """EnsembleGPT.forward (bmm linears on (E, B T, C), q and k rotated together in the rotate-half form, additive
    routing masks made once) against forward_reference (GPT.forward op for op with a member axis): the same logits
    and the same gradients, bit for bit on one thread, with and without a member index; so the speed-up leaves
    every seed's training as it was."""
    models = _members(cfg, [0, 1, 2])
    ens = EnsembleGPT.from_members(models)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(1, cfg.vocab_size, (2, 4, 12), generator=g)
    idx[:, :, 2] = 5  # a request marker of ROUTED (a plain token elsewhere)
    idx[0, 1, 9:] = 0  # right padding
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for members in (None, torch.tensor([2, 0])):
            rows = idx if members is not None else torch.cat([idx, idx[:1]])
            out = []
            for forward in (EnsembleGPT.forward, EnsembleGPT.forward_reference):
                ens.zero_grad(set_to_none=True)
                logits = forward(ens, rows, members)
                (logits.square() * torch.linspace(0, 1, logits.shape[-1])).sum().backward()
                out.append((logits.detach(), [q.grad.clone() for q in ens.parameters()]))
            assert torch.equal(out[0][0], out[1][0])
            for a, b in zip(out[0][1], out[1][1]):
                assert torch.equal(a, b)
    finally:
        torch.set_num_threads(threads)


def test_sample_batch_encodes_as_encode_words():
    """The batch's ids and answer mask, built in numpy, against lm.encode_words and a torch mask from the same draws
    (the same rng stream drawn again through tasks' own functions, in sample_batch's order)."""
    from papers.orion import tasks
    from papers.orion.lm import encode_words

    voc, sample = _real_sampler(3)
    x, mask = sample(False)
    r = np.random.default_rng(3)
    fam = tasks.FAMILIES["story"]
    train_styles, _ = tasks.split_styles(fam, 0.25, 0)
    seqs, marks = [], []
    for _ in range(8):
        if r.random() < 0.25:
            tokens, targets = tasks.copy_sequence(voc, r, length=(2, 6), separated=bool(r.random() < 1.0))
        else:
            r.integers(1)  # the family draw (one family)
            n_req = int(r.integers(1, min(3, len(fam.keys)) + 1))
            tokens, targets = tasks.training_sequence(fam, train_styles[r.integers(len(train_styles))], voc, r,
                                                      requests=n_req)
        seqs.append(tokens)
        marks.append(targets)
    ids = encode_words(seqs, voc.index).ids
    ref = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
    for i, targets in enumerate(marks):
        ref[i, targets] = True
    assert x.dtype == ids.dtype and torch.equal(x, ids) and torch.equal(mask, ref) and mask.any()


@pytest.mark.parametrize("cfg", [CFG, WINDOWED, KEYS_ONLY, ROUTED], ids=["plain", "kv_window", "values_in_block_1", "routed"])
def test_the_packed_training_pass_is_each_plain_gpts_loss_within_float_tolerance(cfg):
    """Issue 47's budget round: training runs the position-wise layers on each member's real tokens only
    (EnsembleGPT.forward_packed through train.member_losses: no padding, the head only where the loss reads it), a
    change of float rounding, not of the function. Against each member as a plain GPT (model.GPT.forward on its
    padded batch, train.loss_fn) on ragged batches cut into parts: the same losses and gradients within float
    tolerance (every weight's, the tied embedding included)."""
    _packed_against_plain(cfg, [_ragged_batch(0, [3, 11, 5, 16, 8, 4], 16), _ragged_batch(1, [9, 4, 14, 6, 3, 12], 14)])


@pytest.mark.parametrize("cfg", [WINDOWED, KEYS_ONLY], ids=["kv_window", "values_in_block_1"])
def test_the_packed_pass_reads_each_parts_own_members_window_weights(cfg):
    """The parts of a packed step need not hold the members in order: here member 1's sequences are all longer than
    members 0's and 2's, so its parts hold it alone and theirs hold (0, 2). Each part's attention must use its own
    members' key/value window weights (review orion_r10's mutant M3: the first len(rows) members' weights instead)."""
    batches = [_ragged_batch(2, [3, 4, 5, 6, 7, 8], 8), _ragged_batch(3, [9, 10, 11, 12, 13, 14], 14),
               _ragged_batch(4, [8, 3, 6, 4, 7, 5], 8)]
    parts = trainer.length_buckets(batches, 2)
    assert sorted(rows.tolist() for rows, _, _ in parts) == [[0, 2], [0, 2], [1], [1]]
    _packed_against_plain(cfg, batches, seeds=[7, 8, 9])


def _packed_against_plain(cfg, batches, seeds=(7, 8)):
    """train.member_losses (EnsembleGPT.forward_packed) on `batches` cut into 2 parts by length, against each member
    as a plain GPT (train.loss_fn): losses and every weight's gradient within float tolerance."""
    for x, _ in batches:
        x[x == 5] = 6
        x[:, 1] = 5  # a request marker of ROUTED (a plain token elsewhere) in every sequence
    models = _members(cfg, list(seeds))
    ens = EnsembleGPT.from_members(models)
    losses = trainer.member_losses(ens, trainer.length_buckets(batches, 2), lm_weight=0.5)
    losses.sum().backward()
    for e, (m, (x, mask)) in enumerate(zip(models, batches)):
        loss, _ = trainer.loss_fn(m, x, mask, lm_weight=0.5)
        loss.backward()
        torch.testing.assert_close(losses[e], loss, atol=1e-6, rtol=1e-5)
        grads = {n: q.grad for n, q in m.named_parameters()}  # wte.weight: the embedding's and the tied head's
        for key, value in ens.params.items():
            for name, g in _gpt_names(key, value.grad[e]):
                if name != "lm_head.weight":
                    torch.testing.assert_close(g, grads[name], atol=1e-5, rtol=1e-4, msg=name)
