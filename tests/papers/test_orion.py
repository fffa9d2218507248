"""P1 orion: the tasks' bookkeeping, the model's hooks against closed forms, request-patching on hand-built cases."""

import numpy as np
import pandas as pd
import pytest
import torch

from papers.orion import model as model_lib
from papers.orion import patching, tasks
from papers.orion.lm import WordLM
from papers.orion.model import GPT, GPTConfig, last_logits, patched_logits, residuals, rotary, rotary_angles
from papers.orion.params import parse

WORDS = [f"w{a}{b}{c}" for a in "abcdefgh" for b in "abcdefgh" for c in "abcd"]  # 256 fake lower-case words


@pytest.fixture(scope="module")
def vocab():
    return tasks.build_vocab([w.replace("w", "q") for w in WORDS], pool_size=30, numbers=40, seed=0)


# ---- word list --------------------------------------------------------------------------------
def test_load_words_filters_and_names_bad_lines(tmp_path):
    path = tmp_path / "words"
    path.write_bytes("apple\nBob\ncan't\ncafé\nox\nzebra\napple\n".encode())
    assert tasks.load_words(path, min_len=3, max_len=7) == ["apple", "zebra"]
    path.write_bytes(b"apple\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"words, line 2"):
        tasks.load_words(path)
    with pytest.raises(FileNotFoundError, match="wamerican"):
        tasks.load_words(tmp_path / "missing")


def test_vocab_pools_are_disjoint_and_avoid_template_words(vocab):
    pools = [set(vocab.pools[k]) for k in ("name", "city", "job", "word")]
    assert all(len(p) == 30 for p in pools)
    assert sum(len(p) for p in pools) == len(set().union(*pools))
    template = set().union(*(tasks.family_words(f) for f in tasks.FAMILIES.values()))
    assert not template & set().union(*pools)
    assert len(set(vocab.tokens)) == len(vocab.tokens) and vocab.tokens[0] == tasks.PAD


@pytest.mark.parametrize("name", list(tasks.FAMILIES))
def test_style_split_holds_out_new_combinations_of_seen_wordings(name):
    fam = tasks.FAMILIES[name]
    train, test = tasks.split_styles(fam, 0.25, seed=3)
    assert train and test and not set(train) & set(test)
    assert set(train) | set(test) == set(tasks.styles(fam))
    for part in (0, 1):
        wordings = lambda ss: {(j, v) for _, vs in ss for j, v in enumerate(vs)} if part else {p for p, _ in ss}  # noqa: E731
        assert wordings(test) <= wordings(train)
    assert tasks.split_styles(fam, 0.25, seed=3) == (train, test)


# ---- prompts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(tasks.FAMILIES))
def test_prompt_binds_every_key_once_and_answers_the_request(name, vocab):
    fam = tasks.FAMILIES[name]
    rng = np.random.default_rng(0)
    for style in tasks.styles(fam)[:5]:
        pr = tasks.make_prompt(fam, style, vocab, rng)
        values = list(pr.bindings.values())
        assert len(set(values)) == len(fam.keys)
        for v in values:  # each value appears `repeats` times in the context, nowhere else
            assert pr.context.count(v) == fam.repeats
        assert pr.answer == pr.bindings[pr.key]
        assert pr.answer not in pr.request
        assert all(t in vocab.index for t in pr.tokens)


@pytest.mark.parametrize("name", list(tasks.FAMILIES))
def test_patch_pair_names_three_different_answers(name, vocab):
    fam = tasks.FAMILIES[name]
    _, test = tasks.split_styles(fam, 0.25, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        pair = tasks.patch_pair(fam, test, vocab, rng)
        assert len({pair["r1c1"], pair["r2c2"], pair["r1c2"]}) == 3
        x1, x2, x21 = (pair[c].split() for c in ("x1", "x2", "x21"))
        # x21 is C2 followed by R1: same context prefix as x2, same request suffix as x1
        r1 = _request_suffix(fam, x1)
        assert x21[-len(r1):] == r1 and x21[:-len(r1)] == x2[:len(x21) - len(r1)]
        assert pair["r1c2"] in x2 and pair["r1c1"] in x1 and pair["r1c1"] not in x2
        # the control's source x3 = (C3, R2): x2's request, the same tokens, on a context whose answer is not in C2
        x3, r2 = pair["x3"].split(), _request_suffix(fam, x2)
        assert x3[-len(r2):] == r2 and x3[:-len(r2)] != x2[:-len(r2)]
        assert pair["r2c3"] in x3[:-len(r2)] and pair["r2c3"] not in x2
        assert len({pair["r2c2"], pair["r1c2"], pair["r2c3"]}) == 3


def _request_suffix(fam, tokens):
    """The longest request wording of `fam` that ends `tokens`."""
    found = [r.split() for key in fam.keys for r in fam.requests[key] if tokens[-len(r.split()):] == r.split()]
    assert found, f"no request of {fam.name} ends {tokens}"
    return max(found, key=len)


def test_injected_prompt_differs_from_its_clean_twin_by_the_note_only(vocab):
    _, test = tasks.split_styles(tasks.FAMILIES["story"], 0.25, seed=0)
    rng = np.random.default_rng(2)
    for _ in range(10):
        row = tasks.injected_prompt(test, vocab, rng, "city")
        clean, injected = row["clean"].split(), row["injected"].split()
        note = tasks.INJECTION.replace("{k}", row["injected_key"]).split()
        i = next(i for i in range(len(injected)) if injected[i:i + len(note)] == note)
        assert injected[:i] + injected[i + len(note):] == clean
        assert row["injected_key"] != "city" and row["answer"] != row["injected_answer"]
        assert row["answer"] in clean and row["injected_answer"] in clean


def _story_prompts(family, vocab, n=300, seed=6):
    _, test = tasks.split_styles(family, 0.25, seed=0)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        pr = tasks.test_prompt(family, test, vocab, rng)
        rows.append({"key": pr.key, "prompt": " ".join(pr.tokens), "answer": pr.answer, "request_tokens": len(pr.request)})
    return pd.DataFrame(rows)


def test_the_story_shares_one_pool_so_no_rule_that_skips_the_binding_answers_well(vocab):
    """The task premise of (a) and (b) (independent review of issue 47): with one pool for every attribute, picking the
    asked attribute's kind among the context's values is right 1/3 of the time; with a pool per attribute (the earlier
    story) it is always right, which the gate must catch."""
    import dataclasses

    shared = tasks.FAMILIES["story"]
    assert len({shared.pool_of(k) for k in shared.keys}) == 1
    prompts = _story_prompts(shared, vocab)
    got = tasks.shortcut_accuracy(shared, vocab, prompts)
    assert got["type_rule"] == pytest.approx(1 / 3)
    assert got["fixed_key_rule"] == prompts.key.value_counts().max() / len(prompts) < 0.45
    assert got["best"] == max(got["type_rule"], got["fixed_key_rule"]) <= parse({}).claims.shortcut_accuracy_max
    typed = dataclasses.replace(shared, pool={"name": "name", "city": "city", "job": "job"})
    assert tasks.shortcut_accuracy(typed, vocab, _story_prompts(typed, vocab))["type_rule"] == 1.0
    # every value of a story clause follows a word that names its attribute, the same for all wordings of one key
    before = {k: {c.split()[c.split().index("{v}") - 1] for c in tasks.STORY_CLAUSES[k]} for k in shared.keys}
    assert all(c.split()[0] != "{v}" for cs in tasks.STORY_CLAUSES.values() for c in cs)
    assert not set.intersection(*before.values()) and sum(map(len, before.values())) == len(set().union(*before.values()))
    row = prompts.iloc[0]
    positions = tasks.value_positions(shared, vocab, row.prompt.split(), row.request_tokens)
    assert len(positions) == 3 and row.answer in [row.prompt.split()[i] for i in positions]


def test_training_sequence_marks_the_positions_before_each_answer(vocab):
    fam = tasks.FAMILIES["quantity"]
    rng = np.random.default_rng(4)
    tokens, targets = tasks.training_sequence(fam, tasks.styles(fam)[0], vocab, rng, requests=3)
    assert len(targets) == 3
    for t in targets:
        assert tokens[t + 1] in vocab.pools["number"]  # the next token is an answer
        req = _request_suffix(fam, tokens[:t + 1])
        key = next(k for k in fam.keys if k in req)
        i = tokens.index(tokens[t + 1])  # the answer's first appearance is its binding in the context
        assert key in tokens[max(0, i - 2):i + 3]


def test_copy_sequence_repeats_its_list_and_marks_the_predictable_copies(vocab):
    rng = np.random.default_rng(5)
    for _ in range(20):
        tokens, targets = tasks.copy_sequence(vocab, rng, length=(3, 6))
        head = tasks.COPY_PREFIX.split()
        n = (len(tokens) - len(head)) // 2
        first, second = tokens[len(head):len(head) + n], tokens[len(head) + n:]
        assert tokens[:len(head)] == head and first == second and len(set(first)) == n and 3 <= n <= 6
        # every target's next token is the word that followed the previous occurrence of the target's token
        assert targets == list(range(len(head) + n, len(tokens) - 1))
        for t in targets:
            j = tokens.index(tokens[t])
            assert j < t and tokens[j + 1] == tokens[t + 1]



def test_separated_copy_needs_the_token_before_the_separator(vocab):
    """w1 s w2 s .. w1 s w2 s ..: each target is a separator of the second copy; its next token is the word that
    followed the previous occurrence of the word before it (a 2-token match), while the separator itself occurs
    before every word of the list (a match on the current token alone is ambiguous)."""
    rng = np.random.default_rng(6)
    for _ in range(20):
        tokens, targets = tasks.copy_sequence(vocab, rng, length=(3, 6), separated=True)
        head = tasks.COPY_PREFIX.split()
        body = tokens[len(head):]
        half = len(body) // 2
        assert body[:half] == body[half:] and half % 2 == 0
        n, sep = half // 2, body[1]
        assert sep in tasks.COPY_SEPARATORS and body[1::2] == [sep] * (2 * n) and 3 <= n <= 6
        assert len(targets) == n - 1
        for t in targets:
            assert tokens[t] == sep
            j = tokens.index(tokens[t - 1])  # the first occurrence of the word before the separator
            assert j < t - 1 and tokens[j + 2] == tokens[t + 1]
            followers = {tokens[i + 1] for i in range(t) if tokens[i] == sep}
            assert len(followers) > 1  # the separator alone does not say which word comes next


# ---- model ------------------------------------------------------------------------------------
def _tiny_model(seed=0, n_layer=3, kv_window=1, value_layers=-1):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=23, block_size=32, n_layer=n_layer, n_head=2, n_embd=16, kv_window=kv_window,
                          value_layers=value_layers))
    with torch.no_grad():
        for blk in model.blocks:
            if blk.attn.kv_mix is not None:  # away from its identity init, so that every tap is exercised
                blk.attn.kv_mix.normal_()
    return model.eval()


def _conv_window(z, w):
    """An independent causal depthwise convolution: y_t = sum_j w[:, j] z_{t-j}, by torch's conv1d. z (B, T, C)."""
    K = w.shape[1]
    out = torch.nn.functional.conv1d(torch.nn.functional.pad(z.transpose(1, 2), (K - 1, 0)), w.flip(1)[:, None],
                                     groups=z.shape[-1])
    return out.transpose(1, 2)


def test_rotary_scores_depend_on_the_offset_only():
    cos, sin = rotary_angles(20, 8)
    q, k = torch.randn(8), torch.randn(8)
    def score(i, j):  # noqa: E306
        qi = rotary(q.view(1, 1, 1, 8), cos[i:i + 1], sin[i:i + 1]).flatten()
        kj = rotary(k.view(1, 1, 1, 8), cos[j:j + 1], sin[j:j + 1]).flatten()
        return float(qi @ kj)
    assert score(7, 3) == pytest.approx(score(15, 11), abs=1e-5)
    assert score(5, 5) == pytest.approx(float(q @ k), abs=1e-5)


@pytest.mark.parametrize("kv_window, value_layers", [(1, -1), (3, -1), (3, 1), (3, 0)])
def test_forward_matches_an_independent_attention_implementation(kv_window, value_layers):
    """The model against torch's SDPA and, for the key/value window, torch's conv1d (an independent path)."""
    model = _tiny_model(kv_window=kv_window, value_layers=value_layers)
    idx = torch.randint(1, 23, (3, 11))
    ref_logits = model(idx)

    def sdpa_forward(idx):  # the same weights through torch's own attention
        x = model.wte(idx)
        cos, sin = model.cos[:idx.shape[1]], model.sin[:idx.shape[1]]
        for i, blk in enumerate(model.blocks):
            h = blk.ln_1(x)
            B, T, C = h.shape
            q, k, v = blk.attn.c_attn(h).split(C, dim=2)
            if kv_window > 1:
                k = _conv_window(k, blk.attn.kv_mix[0])
                v = _conv_window(v, blk.attn.kv_mix[1]) if value_layers < 0 or i < value_layers else v
            q, k, v = (z.view(B, T, 2, C // 2).transpose(1, 2) for z in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(rotary(q, cos, sin), rotary(k, cos, sin), v, is_causal=True)
            x = x + blk.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
            x = x + blk.mlp(blk.ln_2(x))
        return model.lm_head(model.ln_f(x))

    torch.testing.assert_close(ref_logits, sdpa_forward(idx), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kv_window", [1, 4])
def test_causality_and_right_padding_do_not_change_the_last_token(kv_window):
    model = _tiny_model(kv_window=kv_window)
    idx = torch.randint(1, 23, (1, 9))
    padded = torch.cat([idx, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(last_logits(model, idx, torch.tensor([8])), last_logits(model, padded, torch.tensor([8])))


def test_patching_hooks_against_closed_forms():
    model = _tiny_model()
    idx1, idx2 = torch.randint(1, 23, (4, 10)), torch.randint(1, 23, (4, 12))
    pos1, pos2 = torch.tensor([9, 7, 9, 5]), torch.tensor([11, 11, 3, 8])
    res1, res2 = residuals(model, idx1, pos1), residuals(model, idx2, pos2)
    assert res1.shape == (4, 4, 16)
    clean2 = last_logits(model, idx2, pos2)
    for layer in range(4):  # writing a run's own state back changes nothing
        torch.testing.assert_close(patched_logits(model, idx2, pos2, layer, res2[layer]), clean2)
    # at the last layer the patched output is the source's output (nothing after it reads other tokens)
    torch.testing.assert_close(patched_logits(model, idx2, pos2, 3, res1[3]), last_logits(model, idx1, pos1),
                               rtol=1e-5, atol=1e-5)
    # at an inner layer the patch changes the output (and only at the patched token)
    assert not torch.allclose(patched_logits(model, idx2, pos2, 1, res1[1]), clean2)


# ---- the window premise and the routed positive control ---------------------------------------------
def test_request_blind_mask_against_a_hand_written_one():
    """Marker 9 opens a request at positions 2 and 6: a position from a marker on sees neither that marker nor the
    tokens after it up to itself (but itself, and everything before the marker); before any marker, causal only."""
    idx = torch.tensor([[1, 2, 9, 3, 4, 5, 9, 6]])
    allowed = model_lib.request_blind_mask(idx, torch.tensor([9]))[0]
    expected = torch.zeros(8, 8, dtype=torch.bool)
    for t in range(8):
        start = max([m for m in (2, 6) if m <= t], default=None)
        for s_ in range(t + 1):
            expected[t, s_] = start is None or s_ < start or s_ == t
    assert torch.equal(allowed, expected)
    assert allowed.diagonal().all()  # no query row is empty
    # the first block's mask: inside a request, its own request only (from the marker on); before any, causal
    first = model_lib.request_only_mask(idx, torch.tensor([9]))[0]
    expected = torch.zeros(8, 8, dtype=torch.bool)
    for t in range(8):
        start = max([m for m in (2, 6) if m <= t], default=0)
        expected[t, start:t + 1] = True
    assert torch.equal(first, expected)


@pytest.mark.parametrize("routed", [True, False])
def test_a_routed_model_reads_its_request_through_the_last_token_only(routed):
    """In a routed model (random weights) the request reaches the output only through the last token's state after
    block 1, and that state holds nothing of the context: patching (C1, R1)'s last-token state at layer 1 into
    (C2, R2) gives the output of (C2, R1) exactly, R1(C2), the decomposition planted by construction (C1 is even
    longer than C2). A plain model reads R2's tokens (and C1 through the patched state) again, so it does not."""
    torch.manual_seed(1)
    marker = 9
    cfg = GPTConfig(vocab_size=23, block_size=32, n_layer=3, n_head=2, n_embd=16,
                    request_markers=(marker,) if routed else ())
    model = GPT(cfg).eval()
    c1, c2 = torch.randint(10, 23, (4, 9)), torch.randint(10, 23, (4, 7))
    r1, r2 = torch.randint(10, 23, (4, 3)), torch.randint(10, 23, (4, 3))
    last, open_ = torch.full((4, 1), 5), torch.full((4, 1), marker)
    x1, x2, x21 = (torch.cat([c, open_, r, last], 1) for c, r in ((c1, r1), (c2, r2), (c2, r1)))
    pos1, pos2 = torch.full((4,), x1.shape[1] - 1), torch.full((4,), x2.shape[1] - 1)
    patched = patched_logits(model, x2, pos2, 1, residuals(model, x1, pos1)[1])
    if routed:
        torch.testing.assert_close(patched, last_logits(model, x21, pos2), rtol=1e-5, atol=1e-5)
    else:
        assert not torch.allclose(patched, last_logits(model, x21, pos2), atol=1e-3)


@pytest.mark.parametrize("routed", [False, True])
def test_last_token_attention_reproduces_each_blocks_attention_output(routed):
    """model.last_token_attention's weights, applied to each block's values and projected, give the block's attention
    output at the last token (computed by the model's own attention kernel); rows sum to 1 and put nothing on later
    positions; in a routed model, block 1 puts nothing before the request's opening token."""
    torch.manual_seed(2)
    marker = 9
    cfg = GPTConfig(vocab_size=23, block_size=32, n_layer=3, n_head=2, n_embd=16,
                    request_markers=(marker,) if routed else ())
    model = GPT(cfg).eval()
    idx = torch.randint(10, 23, (3, 12))
    idx[:, 8] = marker
    pos = torch.tensor([11, 10, 9])
    w = model_lib.last_token_attention(model, idx, pos)  # (L, B, H, T)
    assert w.shape == (3, 3, 2, 12)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 3, 2))
    for b, q in enumerate(pos):
        assert float(w[:, b, :, q + 1:].abs().sum()) == 0.0
    if routed:
        assert float(w[0, :, :, :8].abs().sum()) == 0.0 and float(w[1, :, :, :8].sum()) > 0
    streams = []
    model(idx, hook=lambda layer, x: streams.append(x) or x)
    rows = torch.arange(3)
    cos, sin = model.cos[:12], model.sin[:12]
    masks = model_lib.routing_masks(idx, torch.tensor([marker])) if routed else None
    for i, blk in enumerate(model.blocks):
        h = blk.ln_1(streams[i])
        v = blk.attn.c_attn(h).split(16, dim=2)[2].view(3, 12, 2, 8).transpose(1, 2)  # (B, H, T, D)
        y = (w[i][..., None] * v).sum(2)  # (B, H, D)
        mine = blk.attn.c_proj(y.reshape(3, 16))
        theirs = blk.attn(h, cos, sin, masks)[rows, pos]
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_value_reach_after_a_patched_layer():
    """The positions before the last token that value windows in the blocks after layer L read."""
    def reach(**kw):
        cfg = GPTConfig(vocab_size=5, block_size=8, n_layer=4, **kw)
        return [cfg.value_reach_after(L) for L in range(5)]

    assert reach() == [0] * 5  # plain attention
    assert reach(kv_window=4, value_layers=0) == [0] * 5  # keys only
    assert reach(kv_window=4) == [3, 3, 3, 3, 0]  # values in every block: around every patch but the last
    assert reach(kv_window=4, value_layers=1) == [3, 0, 0, 0, 0]  # values in block 1: around the embedding patch only


def test_key_distance_and_request_markers():
    story = ("Q : where did the hero live ? A :".split(), "Q : who is the hero ? A :".split())
    assert tasks.key_distance(*story) == 3  # "live" / "hero", three before the last ":"
    assert tasks.key_distance("alpha :".split(), "beta :".split()) == 1
    assert tasks.request_markers(["story"]) == ("Q",)
    with pytest.raises(ValueError, match="induction"):
        tasks.request_markers(["story", "induction"])  # "alpha" opens a request and sits in every context


def test_validation_prompts_avoid_every_test_prompt(vocab):
    """Few held-out styles and tiny pools, so that draws collide: the validation set still holds no test prompt."""
    from papers.orion.stages import validation_prompts

    fam = tasks.FAMILIES["induction"]
    train, held_out = tasks.split_styles(fam, 0.25, seed=0)
    split = {"induction": (train, held_out)}  # the draws collide most with every held-out style on both sides
    small = tasks.Vocab(tokens=vocab.tokens, pools={**vocab.pools, "word": vocab.pools["word"][:6]})
    rng = np.random.default_rng(0)
    test = pd.DataFrame({"prompt": [" ".join(tasks.test_prompt(fam, split["induction"][1], small, rng).tokens)
                                    for _ in range(300)]})
    val = validation_prompts([fam], split, small, 50, test, np.random.default_rng(1))
    assert len(val) == 50 and not set(val.prompt) & set(test.prompt)


# ---- request-patching bookkeeping --------------------------------------------------------------
def _sweep(values):
    """A sweep table from {layer: (R2(C2), R1(C2), R1(C1))} normalised values."""
    return pd.DataFrame([{"layer": L, "hypothesis": h, "normalized": v}
                         for L, vs in values.items() for h, v in zip(patching.HYPOTHESES, vs)])


def test_profile_detection():
    good = _sweep({0: (1, 0, 0), 1: (0.6, 0.3, 0), 2: (0.1, 0.9, 0), 3: (0, 0.2, 0.9), 4: (0, 0, 1)})
    assert patching.layer_profile(good) == ["R2(C2)", "R2(C2)", "R1(C2)", "R1(C1)", "R1(C1)"]
    assert patching.is_decomposition_profile(patching.layer_profile(good))
    assert patching.best_layer(good) == 2
    skip = _sweep({0: (1, 0, 0), 1: (0.2, 0.1, 0.8), 2: (0, 0, 1)})  # never R1(C2)
    back = _sweep({0: (1, 0, 0), 1: (0, 1, 0), 2: (0.9, 0, 0), 3: (0, 0, 1)})  # falls back to R2(C2)
    assert not patching.is_decomposition_profile(patching.layer_profile(skip))
    assert not patching.is_decomposition_profile(patching.layer_profile(back))
    # the interior-layer test (claim (b)) ignores the end layers, which are fixed by construction
    assert patching.is_interior_decomposition(patching.layer_profile(good))
    assert not patching.is_interior_decomposition(patching.layer_profile(skip))
    assert not patching.is_interior_decomposition(patching.layer_profile(back))
    assert patching.is_interior_decomposition(["R1(C1)", "R1(C2)", "R2(C2)"])  # wrong ends: not the claim's business
    assert not patching.is_interior_decomposition(["R2(C2)", "R1(C1)"])  # no interior layer: cannot hold
    # a floor: a layer whose largest ratio is below it has no dominant output, and the profile fails there
    assert patching.layer_profile(good, floor=0.5) == patching.layer_profile(good)
    noise = _sweep({0: (0.05, 0, 0), 1: (0.001, 0.01, 0.002), 2: (0, 0.002, 0.01), 3: (0, 0, 0.003)})
    assert patching.is_interior_decomposition(patching.layer_profile(noise))  # the argmax of noise "decomposes"
    assert patching.layer_profile(noise, floor=0.5) == [patching.NONE] * 4
    assert not patching.is_interior_decomposition(patching.layer_profile(noise, floor=0.5))
    assert not patching.is_decomposition_profile(patching.layer_profile(noise, floor=0.5))
    broken = _sweep({0: (1, 0, 0), 1: (0.3, 0.2, 0.1), 2: (0, 0.9, 0), 3: (0, 0, 1)})  # layer 1: nothing dominates
    assert patching.is_interior_decomposition(patching.layer_profile(broken))
    assert not patching.is_interior_decomposition(patching.layer_profile(broken, floor=0.5))


def test_interior_rule_allows_no_dominant_output_only_at_the_retrieval_transition():
    """Claim (b) after issue 47's second review: a layer with no dominant output passes between the last R1(C2)
    layer and the next R1(C1) (the routed control's mid-retrieval layers), nowhere else; the rule before the review
    (is_strict_interior_decomposition) failed every such profile."""
    R2, R1, A, N = (*patching.HYPOTHESES, patching.NONE)
    transition = [[R2, R1, N, A, A], [R2, R1, R1, N, A], [R2, R1, N, N, A]]
    for profile in transition:
        assert patching.is_interior_decomposition(profile)
        assert not patching.is_strict_interior_decomposition(profile)
    for profile in ([R2, N, R1, A, A],  # before R1(C2): the request was not moved there
                    [R2, R1, N, R1, A],  # back to R1(C2) after the gap
                    [R2, R1, N, N],  # no R1(C1) after the gap
                    [R2, N, A, A, A], [R2, R2, N, N, A], [R2, N, N, N, A]):  # R1(C2) never dominates
        assert not patching.is_interior_decomposition(profile)
    assert patching.is_interior_decomposition([R2, R1, A, A]) and patching.is_strict_interior_decomposition([R2, R1, A, A])


def test_validation_styles_are_apart_from_training_and_test_styles():
    """The early-stopping gate reads styles held out from training and from the test prompts (issue 47's review)."""
    fam = tasks.FAMILIES["story"]
    train, held_out = tasks.split_styles(fam, 0.25, seed=0)
    val, test = tasks.split_held_out(held_out, 0.5, seed=3)
    assert val and test and sorted(val + test) == sorted(held_out)
    assert not set(val) & set(test) and not set(val) & set(train)
    assert tasks.split_held_out(held_out, 0.5, seed=3) == (val, test)
    assert len(tasks.split_held_out(held_out, 0.99, seed=3)[1]) == 1  # one test style at least
    with pytest.raises(ValueError, match="2 at least"):
        tasks.split_held_out(held_out[:1], 0.5, seed=3)


MODELS = [{"name": "T", "n_layer": 4, "n_embd": 32, "n_head": 2},
          {"name": "R", "n_layer": 4, "n_embd": 32, "n_head": 2, "routed": True}]
NO_OVERSIGHT = pd.DataFrame(columns=["model", "seed", "n_layer", "layer", "before", "after", "after_other",
                                     "follows_before", "follows_after", "clean_before", "clean_after"])


def _params(seeds=3, models=MODELS):
    return parse({"seeds": seeds, "models": models, "families": ["story", "code"]})


# the task premise as report.report measures it (tasks.shortcut_accuracy): met (shared pool) and unmet (typed pools)
SHARED = {"story": {"type_rule": 1 / 3, "fixed_key_rule": 0.36, "best": 0.36}}
TYPED = {"story": {"type_rule": 1.0, "fixed_key_rule": 0.36, "best": 1.0}}


def _claim_inputs(values, seeds=3, families=("story",), gated=True, control=0.1, planted=None, window=0,
                  margins=None, planted_margins=None):
    """A pairs table as report.summarise writes it, for the tested model T and the routed model R: per seed s, every
    family of T has max_L p(R1(C2)) / p_clean = values[s] and the interior margin of R1(C2) margins[s] (default
    values[s] - 0.45: of the same sign as values[s] - dominance_min for every value used here, and 0.05 away from
    it, so that (b) is not a corollary of (a) and its premise that the two can be told apart is met; the corollary
    tests pass values - 0.5), R likewise planted[s] (default 1.0) and planted_margins[s]; under the same-request
    control T has `control` and control - 0.5; `window`: request tokens a value window of T reads around the patch."""
    margins = [v - 0.45 for v in values] if margins is None else margins
    planted = [1.0] * seeds if planted is None else planted
    planted_margins = [v - 0.45 for v in planted] if planted_margins is None else planted_margins
    pairs = []
    for model, ratio, margin in (("T", values, margins), ("R", planted, planted_margins)):
        for seed in range(seeds):
            for fam in families:
                good = margin[seed] > 0
                pairs.append({"model": model, "seed": seed, "family": fam, "routed": model == "R", "n_layer": 4,
                              "width": 32, "gate_step": 100, "accuracy": 1.0 if gated else 0.5, "gated": gated,
                              "window_tokens": window if model == "T" else 0, "key_distance": 3,
                              "r1c2_max": ratio[seed], "r1c2_layer": 2, "depth": 0.5, "b_margin": margin[seed],
                              "profile": "R2(C2) > R1(C2) > R1(C2) > R1(C1) > R1(C1)" if good else
                                         "R2(C2) > R2(C2) > R1(C1) > R1(C1) > R1(C1)",
                              "interior": good, "interior_strict": good, "ends_by_construction": True,
                              "control_r1c2_max": control, "control_b_margin": control - 0.5,
                              "control_interior": control > 0.5, "control_interior_strict": control > 0.5,
                              "control_r2c2_l1": 1.0, "control_profile": "R2(C2) > R2(C2) > R2(C3) > R2(C3) > R2(C3)",
                              "values_b1": 0.1 if model == "T" else 0.0, "request_later": 0.2})
    return pd.DataFrame(pairs)


def _verdicts(claims):
    return [c.verdict for c in claims]


ABOVE, BELOW, STRADDLE = [0.9, 0.95, 0.85], [0.3, 0.35, 0.25], [0.95, 0.4, 0.8]
# Six seeds (the fewest at which an exact 95% interval of a share can clear seed_share 0.5: 6 of 6 gives 0.54): all
# meet (a)'s per-seed criterion (>= 0.7), none, half, and a bimodal five of six whose mean (0.87) is above 0.7.
ALL6, NONE6, HALF6 = [0.9, 0.95, 0.85, 0.99, 0.8, 0.92], [0.3, 0.35, 0.25, 0.2, 0.1, 0.4], [0.95, 0.4, 0.8, 0.3, 0.99, 0.2]
BIMODAL6 = [1.0, 1.0, 1.0, 1.0, 1.0, 0.2]


def test_claims_decide_on_the_share_of_gated_seeds_that_meet_the_criterion():
    """Issue 47's fourth review: each seed past the accuracy gate is a binary outcome (meets the paper's per-pair
    criterion or not: (a) max_L p(R1(C2)) / p_clean >= keep_fraction 0.7, (b) an interior margin > 0), and a claim
    holds when the exact Clopper-Pearson 95% interval of the share lies above seed_share 0.5, does not hold when it
    lies below: all of 6 seeds hold, none does not hold, half is inconclusive, and so is a bimodal five of six whose
    mean ratio is above 0.7 (the t interval of the mean, the test before, would not tell these apart)."""
    from scipy import stats

    from papers.orion.report import build_claims

    p = _params(seeds=6)
    assert p.claims.seed_share == 0.5
    holds = build_claims(p, _claim_inputs(ALL6, seeds=6), NO_OVERSIGHT, SHARED)
    assert _verdicts(holds)[:2] == ["holds"] * 2
    part = holds[0].evidence[0]
    assert part.replicates == 6 and part.threshold == 0.5 and "Clopper-Pearson" in part.method and part.effect == 1.0
    assert part.interval == pytest.approx((stats.beta.ppf(0.025, 6, 1), 1.0))  # 0.025^(1/6) = 0.54
    assert part.values == pytest.approx(tuple(ALL6))
    assert holds[1].evidence[0].threshold == 0.5 and holds[1].evidence[0].effect == 1.0
    assert all(c.premise_met and c.positive_control.verdict == "holds" for c in holds[:2])
    assert all(c.control.verdict == "does not hold" and c.control.kind == "null" for c in holds[:2])
    fails = build_claims(p, _claim_inputs(NONE6, seeds=6), NO_OVERSIGHT, SHARED)
    assert _verdicts(fails)[:2] == ["does not hold"] * 2
    assert fails[0].evidence[0].interval[1] == pytest.approx(stats.beta.ppf(0.975, 1, 6))  # 0.46 < 0.5
    half = build_claims(p, _claim_inputs(HALF6, seeds=6), NO_OVERSIGHT, SHARED)
    # 3 of 6: [0.118, 0.882] straddles 0.5; the paper's 0.92, which it excludes, does not decide (issue 47's sixth
    # review: the seeds are analysed right after their accuracy jump)
    assert _verdicts(half)[:2] == ["inconclusive"] * 2 and half[0].evidence[0].effect == 0.5
    assert len(half[0].evidence) == 1 and half[0].evidence[0].interval[1] == pytest.approx(stats.beta.ppf(0.975, 4, 3))
    four = build_claims(p, _claim_inputs([0.9, 0.9, 0.9, 0.9, 0.2, 0.2], seeds=6), NO_OVERSIGHT, SHARED)
    assert _verdicts(four)[:2] == ["inconclusive"] * 2  # 4 of 6: [0.223, 0.957], neither bound decides
    bimodal = build_claims(p, _claim_inputs(BIMODAL6, seeds=6), NO_OVERSIGHT, SHARED)
    assert np.mean(BIMODAL6) > 0.7 and _verdicts(bimodal)[:2] == ["inconclusive"] * 2
    # five seeds that all meet it cannot hold: the interval's lower bound is 0.478
    five = build_claims(_params(seeds=5), _claim_inputs(ALL6[:5], seeds=5), NO_OVERSIGHT, SHARED)
    assert _verdicts(five)[:2] == ["inconclusive"] * 2
    # (b) on its own outcome: ratios above 0.7 but R1(C2) never dominant at an interior layer
    b_fails = build_claims(p, _claim_inputs(ALL6, seeds=6, margins=[-0.2] * 6), NO_OVERSIGHT, SHARED)
    assert _verdicts(b_fails)[:2] == ["holds", "does not hold"]
    # a margin of exactly 0 does not meet (b)'s strict sign; a ratio of exactly 0.7 meets (a)
    edge = build_claims(p, _claim_inputs([0.7] * 6, seeds=6, margins=[0.0] * 6), NO_OVERSIGHT, SHARED)
    assert [c.evidence[0].effect for c in edge[:2]] == [1.0, 0.0]
    # the paper's count of pairs and the gated counts are reported beside
    assert holds[0].measured["seeds_at_or_above_keep_fraction"] == {"T": 6}
    assert half[0].measured["gated_seeds_at_or_above_keep_fraction"] == {"T": 3}
    assert half[1].measured["gated_seeds_with_positive_margin"] == {"T": 3}
    gates = holds[0].premise
    assert len(gates) == 2 and gates[0].name.startswith("tested replicates past the accuracy gate")
    assert gates[0].measured == 6 and "without binding" in gates[1].name
    assert "value window" not in " ".join(g.name for g in gates)  # plain attention: the window gate does not apply
    assert holds[0].threshold_source.kind == "convention" and "0.92" in holds[0].criterion
    assert "98 of the 106" in holds[0].threshold_source.detail and "majority" in holds[0].threshold_source.detail
    assert holds[1].threshold_source.kind == "convention"
    assert "same-request patch" in holds[0].control.description
    one = build_claims(_params(seeds=1), _claim_inputs(ABOVE[:1], seeds=1), NO_OVERSIGHT, SHARED)
    assert _verdicts(one)[:2] == ["inconclusive"] * 2
    assert "no pretrained LM" in one[2].note
    # two families per seed: a seed's value is the mean over its families
    two = build_claims(p, _claim_inputs(ALL6, seeds=6, families=("story", "code")), NO_OVERSIGHT, SHARED)
    assert two[0].evidence[0].values == pytest.approx(tuple(ALL6))


def test_b_is_named_a_corollary_of_a_exactly_where_its_margin_is_a_minus_the_floor():
    """Issue 47's seventh review: where every deciding seed's interior margin equals its (a) ratio minus
    dominance_min (R2(C2) and R1(C1) below the floor at R1(C2)'s peak), (b) says it is a corollary of (a) and counts
    the seeds whose late stage shows inside the model; where the margins differ from that, it says nothing of it."""
    from papers.orion.report import build_claims

    p = _params(seeds=6)
    corollary = [v - 0.5 for v in ALL6]  # (b)'s margin = (a)'s ratio - dominance_min in every seed
    a, same = build_claims(p, _claim_inputs(ALL6, seeds=6, margins=corollary), NO_OVERSIGHT, SHARED)[:2]
    assert "a corollary of (a)" in same.note and "0 of 6" in same.note
    assert same.measured["largest_gap_b_margin_vs_a_ratio_minus_floor"] == pytest.approx(0.0)
    # issue 47's eighth review: a corollary is no second piece of evidence, so (b) reads inconclusive where (a) holds
    assert a.verdict == "holds" and same.verdict == "inconclusive"
    assert not same.premise[-1].met and same.premise[-1].name.startswith("the analogue can tell (b) from (a)")
    late = _claim_inputs(ALL6, seeds=6, margins=corollary).assign(late_interior=lambda d: d.seed < 2)
    assert "in 2 of 6" in build_claims(p, late, NO_OVERSIGHT, SHARED)[1].note
    apart = build_claims(p, _claim_inputs(ALL6, seeds=6, margins=[v - 0.6 for v in ALL6]), NO_OVERSIGHT, SHARED)[1]
    assert "corollary" not in apart.note and apart.verdict == "holds" and apart.premise[-1].met
    assert apart.measured["largest_gap_b_margin_vs_a_ratio_minus_floor"] == pytest.approx(0.1)
    # one seed apart is enough: the analogue can then tell the two claims apart
    one_apart = corollary[:5] + [ALL6[5] - 0.6]
    assert build_claims(p, _claim_inputs(ALL6, seeds=6, margins=one_apart), NO_OVERSIGHT, SHARED)[1].premise[-1].met


def test_the_controls_are_read_by_the_same_criterion():
    """The same-request null must not hold (if it does, the claim cannot hold), and the routed positive control must
    hold on its seeds past the gate: a routed seed below the gate is left out, and with too few left to clear the
    share, or planted ratios below the threshold, the claim is inconclusive."""
    from papers.orion.report import build_claims

    p = _params(seeds=6)
    vacuous = build_claims(p, _claim_inputs(ALL6, seeds=6, control=0.95), NO_OVERSIGHT, SHARED)
    assert [c.control.verdict for c in vacuous[:2]] == ["holds"] * 2 and _verdicts(vacuous)[:2] == ["inconclusive"] * 2
    blind = build_claims(p, _claim_inputs(NONE6, seeds=6, planted=[0.3] * 6), NO_OVERSIGHT, SHARED)
    assert [c.positive_control.verdict for c in blind[:2]] == ["does not hold"] * 2
    assert _verdicts(blind)[:2] == ["inconclusive"] * 2 and "positive control" in blind[0].note
    ungated = _claim_inputs(ALL6, seeds=6)
    ungated.loc[(ungated.model == "R") & (ungated.seed == 0), ["gated", "accuracy", "r1c2_max"]] = (False, 0.3, 0.2)
    left_out = build_claims(p, ungated, NO_OVERSIGHT, SHARED)
    pc = left_out[0].positive_control.evidence[0]
    assert pc.replicates == 5 and "1 of 6 seeds below the accuracy gate left out" in pc.method
    assert left_out[0].positive_control.verdict == "inconclusive" and left_out[0].verdict == "inconclusive"
    seven = _claim_inputs(ALL6 + [0.9], seeds=7)
    seven.loc[(seven.model == "R") & (seven.seed == 0), ["gated", "accuracy", "r1c2_max"]] = (False, 0.3, 0.2)
    assert build_claims(_params(seeds=7), seven, NO_OVERSIGHT, SHARED)[0].verdict == "holds"
    # a tested seed below the gate leaves the count too (6 of 7 past it, all meeting the criterion: holds)
    tested_below = _claim_inputs(ALL6 + [0.2], seeds=7)
    tested_below.loc[(tested_below.model == "T") & (tested_below.seed == 6), ["gated", "accuracy"]] = (False, 0.5)
    tb = build_claims(_params(seeds=7), tested_below, NO_OVERSIGHT, SHARED)
    assert tb[0].verdict == "holds" and tb[0].evidence[0].replicates == 6 and tb[0].premise[0].measured == 6


def test_interior_margin_against_a_hand_built_sweep():
    """(b)'s measure: max over the interior layers of n_R1(C2) - max(other outputs, dominance_min)."""
    from papers.orion.report import interior_margin

    norm = {"R2(C2)": [1.0, 0.1, 0.0, 0.0, 0.0], "R1(C2)": [0.0, 0.8, 0.4, 0.1, 0.0], "R1(C1)": [0.0, 0.0, 0.3, 0.9, 1.0]}
    sweep = pd.DataFrame([{"layer": L, "hypothesis": h, "normalized": v[L]} for h, v in norm.items() for L in range(5)])
    assert interior_margin(sweep, 4, 0.5) == pytest.approx(0.8 - 0.5)  # layer 1: the floor binds
    assert interior_margin(sweep, 4, 0.0) == pytest.approx(0.8 - 0.1)
    weak = sweep.assign(normalized=np.where(sweep.hypothesis == "R1(C2)", sweep.normalized * 0.5, sweep.normalized))
    assert interior_margin(weak, 4, 0.5) == pytest.approx(0.4 - 0.5)  # R1(C2) below the floor: negative
    # the end layers are never read: R1(C2) at L = 0 or n_layer changes nothing
    ends = sweep.assign(normalized=np.where((sweep.hypothesis == "R1(C2)") & sweep.layer.isin([0, 4]), 5.0,
                                            sweep.normalized))
    assert interior_margin(ends, 4, 0.5) == pytest.approx(0.3)
    ctl = sweep.replace({"hypothesis": {"R1(C1)": "R2(C3)"}})
    assert interior_margin(ctl, 4, 0.5, hypotheses=("R2(C2)", "R1(C2)", "R2(C3)")) == pytest.approx(0.3)
    assert np.isnan(interior_margin(sweep[sweep.layer.isin([0, 1])], 1, 0.5))  # no interior layer


def test_an_unmet_premise_never_decides():
    """Pairs below the accuracy gate, a task a rule can answer without binding (or whose shortcut was not measured),
    or a value window that reads the request around the patch: inconclusive, whatever the tested models' patching
    shows."""
    from papers.orion.report import build_claims

    p = _params(seeds=6)
    for values in (ALL6, NONE6):
        decided = build_claims(p, _claim_inputs(values, seeds=6), NO_OVERSIGHT, SHARED)
        assert _verdicts(decided)[:2] == (["holds"] * 2 if values is ALL6 else ["does not hold"] * 2)
        below = build_claims(p, _claim_inputs(values, seeds=6, gated=False), NO_OVERSIGHT, SHARED)
        assert _verdicts(below)[:2] == ["inconclusive"] * 2
        assert "premise not met: tested replicates past the accuracy gate" in below[0].note
        # two tested seeds past the gate (fewer than the 3 a verdict needs): the premise is unmet
        two_gated = _claim_inputs(values, seeds=6)
        two_gated.loc[(two_gated.model == "T") & (two_gated.seed >= 2), ["gated", "accuracy"]] = (False, 0.5)
        few = build_claims(p, two_gated, NO_OVERSIGHT, SHARED)
        assert not few[0].premise[0].met and few[0].premise[0].measured == 2
        typed = build_claims(p, _claim_inputs(values, seeds=6), NO_OVERSIGHT, TYPED)
        assert _verdicts(typed)[:2] == ["inconclusive"] * 2 and "without binding" in typed[0].note
        assert not typed[0].premise[1].met and typed[0].premise[1].measured == 1.0
        unmeasured = build_claims(p, _claim_inputs(values, seeds=6), NO_OVERSIGHT)
        assert _verdicts(unmeasured)[:2] == ["inconclusive"] * 2
        windowed_models = [{**MODELS[0], "kv_window": 3}, MODELS[1]]
        windowed = build_claims(_params(seeds=6, models=windowed_models), _claim_inputs(values, seeds=6, window=3),
                                NO_OVERSIGHT, SHARED)
        assert _verdicts(windowed)[:2] == ["inconclusive"] * 2 and "value window" in windowed[1].note
        assert len(windowed[0].premise) == 3


def test_the_report_counts_gated_pairs_whose_request_does_not_move():
    from papers.orion.report import outcome

    pairs = _claim_inputs(ABOVE, families=("story", "code"))
    pairs.loc[pairs.model == "T", "profile"] = ["R2(C2) > R2(C2) > R2(C2) > R2(C2) > R1(C1)",
                                                "R2(C2) > R1(C2) > R1(C1) > R1(C1) > R1(C1)"] * 3
    pairs.loc[(pairs.model == "T") & (pairs.seed == 2), "gated"] = False  # not counted: the model does not do its task
    text = outcome(_params(), pairs)
    assert "Of the 4 tested pairs past the gate, 2 keep R2(C2) dominant at every interior layer" in text
    assert "Of the 6 positive-control pairs past the gate, 0 keep" in text
    assert "No tested pair passed the gate" in outcome(_params(), pairs.assign(gated=False))
    assert ") passed the validation gate at steps R 100, 100, 100 (cap 1500), T 100, 100, 100 (cap 1500) and were " \
           "analysed at steps R 100, 100, 100 (0 past the gate), T 100, 100, 100 (0 past the gate)." in text
    post = pairs.assign(analysed_step=pairs.gate_step + 600)
    assert "analysed at steps R 700, 700, 700" in outcome(_params(), post)


def test_the_report_computes_what_each_interior_rule_gives():
    """The profile rule reported beside claim (b) is stated with this run's counts under both rules (issue 47's
    second review), and the intervals paragraph says why the claims read a share of seeds with an exact interval."""
    from papers.orion.report import differences

    pairs = _claim_inputs(STRADDLE, families=("story", "code"))
    pairs.loc[pairs.model == "R", "interior_strict"] = False  # the control passes only with the transition
    text = " ".join(differences(_params(), pairs).split())
    assert "How the criteria came to be" in text and "profiles of an earlier run had been seen" in text
    assert "the tested models: 4 of 6 gated pairs with the rule, 4 without the transition" in text
    assert "the positive control: 6 of 6 gated pairs with the rule, 0 without the transition" in text
    assert "draws its values from one shared pool" in text and "window gate does not apply" in text
    assert "The paper's own share, 0.92 (98 of 106), is reported beside" in text and "withdrawn" in text
    assert "lies above 0.5 (a majority, ours)" in text and "Holding needs at least 6 determined seeds" in text
    assert "The value-first route" in text and "could not fail" in text


def test_claim_c_on_pretrained_models_against_the_other_request_control():
    from papers.orion.report import build_claims

    over = pd.DataFrame({"model": ["a", "b", "c"], "seed": 0, "n_layer": 12, "layer": 6, "before": [0.1, 0.2, 0.15],
                         "after": [0.9, 0.95, 0.97], "after_other": [0.1, 0.2, 0.1], "clean_before": [1.0, 0.95, 0.98]})
    c = build_claims(_params(), _claim_inputs(ABOVE), over, SHARED)[2]
    assert c.verdict == "holds" and c.control.verdict == "does not hold" and c.premise_met
    assert c.evidence.effect == pytest.approx(np.mean([0.8, 0.75, 0.82]))
    # a note that costs little accuracy leaves nothing to restore: inconclusive
    mild = build_claims(_params(), _claim_inputs(ABOVE), over.assign(before=[0.9, 0.9, 0.9], after=1.0), SHARED)[2]
    assert mild.verdict == "inconclusive" and "premise not met" in mild.note


def test_request_patching_on_a_model_that_ignores_the_context():
    """A model whose last-token output depends on nothing but the last token's own state: patching at any
    layer >= 0 moves x1's output, so R1(C1) is kept fully and the normalised values are exact ratios."""
    vocab = {t: i for i, t in enumerate(["<pad>", "a", "b", "c", "d", "q"])}

    class Echo(torch.nn.Module):  # logits = the residual itself (V = C); hook sees the one-hot embedding
        cfg = GPTConfig(vocab_size=6, block_size=8, n_layer=1, n_head=1, n_embd=6)

        def forward(self, idx, hook=None, at=None):  # `at`: the logits at those positions only, as GPT.forward
            x = torch.nn.functional.one_hot(idx, 6).float() * 5.0
            for layer in (0, 1):
                x = hook(layer, x) if hook is not None else x
            return x if at is None else x[torch.arange(len(at)), at]

    pairs = pd.DataFrame({"x1": ["a b c"], "x2": ["b c d"], "x21": ["b c c"], "x3": ["a q d"], "r1c1": ["c"],
                          "r2c2": ["d"], "r1c2": ["a"], "r2c3": ["q"]})
    sweep = patching.request_patching(WordLM(Echo(), vocab), pairs)
    p_top = np.exp(5) / (np.exp(5) + 5)
    # the control patches x3 = (C3, R2)'s last state: here its last token "d", x2's own, so nothing changes at any
    # layer: R2(C2) keeps all of its clean probability, and R1(C2), never presented, is never the output
    control = sweep[sweep.source == patching.CONTROL].set_index(["layer", "hypothesis"])
    assert set(control.index.get_level_values(1)) == set(patching.CONTROL_HYPOTHESES)
    for layer in (0, 1):
        assert control.loc[(layer, "R2(C2)"), "normalized"] == pytest.approx(1.0)
        assert control.loc[(layer, "R1(C2)"), "accuracy"] == 0.0 and control.loc[(layer, "R2(C3)"), "accuracy"] == 0.0
    assert patching.layer_profile(sweep[sweep.source == patching.CONTROL], 0.5, patching.CONTROL_HYPOTHESES) == ["R2(C2)"] * 2
    assert patching.as_hypotheses(["R2(C2)", "R1(C2)", "none", "R2(C3)"]) == ["R2(C2)", "R1(C2)", "none", "R1(C1)"]
    r = sweep[sweep.source == "request"].set_index(["layer", "hypothesis"])
    assert r.loc[(1, "R1(C1)"), "normalized"] == pytest.approx(1.0)
    assert r.loc[(0, "R1(C1)"), "prob"] == pytest.approx(p_top)
    assert r.loc[(0, "R2(C2)"), "clean_prob"] == pytest.approx(p_top)
    assert r.loc[(0, "R2(C2)"), "accuracy"] == 0.0


def test_params_parse_and_checks():
    p = parse({})
    assert p.claims.gate_accuracy == 0.9 and p.claims.keep_fraction == 0.7 and p.claims.shortcut_accuracy_max == 0.5
    with pytest.raises(ValueError, match="inject_key"):
        parse({"inject_key": "color"})
    with pytest.raises(ValueError, match="multiple of n_head"):
        parse({"models": [{"name": "bad", "n_layer": 2, "n_embd": 30, "n_head": 4}]})
    with pytest.raises(ValueError, match="kv_window"):
        parse({"models": [{"name": "bad", "n_layer": 2, "n_embd": 32, "n_head": 4, "kv_window": 0}]})
    with pytest.raises(ValueError, match="n_layer must be >= 3"):
        parse({"models": [{"name": "shallow", "n_layer": 2, "n_embd": 32, "n_head": 4},
                          {"name": "R", "n_layer": 3, "n_embd": 32, "n_head": 4, "routed": True}]})
    with pytest.raises(ValueError, match="copy_length"):
        parse({"train": {"copy_length": [9, 3]}})
    with pytest.raises(ValueError, match="length_buckets"):
        parse({"train": {"batch_size": 4, "length_buckets": 5}})
    with pytest.raises(KeyError, match="orion.nope"):
        parse({"nope": 1})
    plain, routed = MODELS
    with pytest.raises(ValueError, match="routed model needs kv_window 1"):
        parse({"models": [plain, {**routed, "kv_window": 4}], "families": ["story"]})
    with pytest.raises(ValueError, match="induction"):  # its requests open with a context word: nothing marks them
        parse({"models": MODELS, "families": ["story", "induction"]})
    with pytest.raises(ValueError, match="routed: true"):
        parse({"models": [plain], "families": ["story"]})
    with pytest.raises(ValueError, match="at least one must be tested"):
        parse({"models": [routed], "families": ["story"]})
    assert p.tested_names and p.control_names and set(p.families) == {"story"}
    # a model's own training overrides lie over orion.train for that model alone; an unknown key is an error
    own = parse({"models": [plain, {**routed, "train": {"lr": 2e-3, "copy_fraction": 0.0}}],
                 "train": {"lr": 5e-3, "copy_fraction": 0.25}})
    assert own.train_for("R").lr == 2e-3 and own.train_for("R").copy_fraction == 0.0
    assert own.train_for("T").lr == 5e-3 and own.train_for("T").copy_fraction == 0.25 and own.train.lr == 5e-3
    with pytest.raises(ValueError, match="unknown key"):
        parse({"models": [plain, {**routed, "train": {"rate": 1.0}}]})


def test_profile_ends_check_reads_every_pair_past_the_gate_or_not():
    """The layer-0 and last-layer outputs are fixed by construction in every pair, so the check reads all pairs: a run
    whose models are all below the gate still checks it, and a pair that ends otherwise fails it."""
    from papers.orion.report import build_checks

    empty = pd.DataFrame({"family": [], "prompt": [], "style": []})
    below = _claim_inputs(BELOW, gated=False)
    check = build_checks(below, empty, empty, {})[0]
    assert check.id == "profile_ends" and check.passed and check.measured == 1.0
    below.loc[0, "ends_by_construction"] = False
    assert not build_checks(below, empty, empty, {})[0].passed


def _pair_sweep(r1c2_pairs, clean=None, n_layer=4, control=0.05):
    """A sweep of one model-task pair with per-pair probabilities (patching.request_patching's columns): R1(C2)'s
    patched probability per pair at every interior layer is `r1c2_pairs` (R2(C2) 0.1, R1(C1) 0.05 there); the ends
    hold by construction; the control's R1(C2) is `control` everywhere, its R2(C2) 0.9."""
    from papers.orion import patching

    B = len(r1c2_pairs)
    clean = np.ones(B) if clean is None else np.asarray(clean, dtype=float)
    rows = []
    for source, hyps in (("request", patching.HYPOTHESES), (patching.CONTROL, patching.CONTROL_HYPOTHESES)):
        for L in range(n_layer + 1):
            for h in hyps:
                if source == "request":
                    v = {"R2(C2)": 1.0 if L == 0 else 0.1, "R1(C2)": np.asarray(r1c2_pairs, dtype=float) if 0 < L < n_layer else 0.0,
                         "R1(C1)": 1.0 if L == n_layer else 0.05}[h]
                else:
                    v = {"R2(C2)": 0.9, "R1(C2)": control, "R2(C3)": 0.05}[h]
                prob = np.broadcast_to(np.asarray(v, dtype=float), (B,)) * clean
                rows.append({"source": source, "layer": L, "hypothesis": h, "prob": prob.mean(),
                             "clean_prob": clean.mean(), "normalized": prob.mean() / clean.mean(),
                             "pair_prob": list(prob), "pair_clean": list(clean)})
    return pd.DataFrame(rows)


def test_pair_bootstrap_resamples_the_patching_pairs_jointly():
    """Issue 47's fifth review: each seed's measure with a 95% bootstrap interval over its patching pairs. A resample
    weights every pair by its count, and each measure is the ratio of the weighted means (as the measure itself, a
    ratio of means); identical pairs give a zero-width interval at the point value."""
    from papers.common.claims import BOOTSTRAP_SEED
    from papers.orion.report import interior_margin, pair_bootstrap

    rng = np.random.default_rng(1)
    r1c2, clean = rng.uniform(0.3, 1.0, 40), rng.uniform(0.5, 1.0, 40)
    sweep = _pair_sweep(r1c2, clean)
    out = pair_bootstrap(sweep, 4, 0.5, floors=(0.3, 0.7), n_boot=200)
    counts = np.random.default_rng(BOOTSTRAP_SEED).multinomial(40, np.full(40, 1 / 40), size=200)
    by_hand = (counts[0] @ (r1c2 * clean)) / (counts[0] @ clean)
    assert out["a_draws"][0] == pytest.approx(by_hand)
    # the margin at floor 0.5: R1(C2) - max(0.1, 0.05, 0.5) on the interior layers
    assert out["b_draws"][0] == pytest.approx(by_hand - 0.5)
    assert out["b_floor_draws"][0.3][0] == pytest.approx(by_hand - 0.3)
    assert out["b_floor_draws"][0.7][0] == pytest.approx(by_hand - 0.7)
    point = interior_margin(sweep[sweep.source == "request"], 4, 0.5)
    assert np.quantile(out["b_draws"], 0.025) < point < np.quantile(out["b_draws"], 0.975)
    assert out["control_a_draws"] == pytest.approx(np.full(200, 0.05))
    same = pair_bootstrap(_pair_sweep(np.full(40, 0.8)), 4, 0.5, n_boot=50)
    assert np.ptp(same["a_draws"]) == pytest.approx(0.0, abs=1e-12) and same["a_draws"][0] == pytest.approx(0.8)
    assert pair_bootstrap(sweep.drop(columns=["pair_prob", "pair_clean"]), 4, 0.5)["a_draws"] is None


def test_a_seed_whose_interval_straddles_its_cut_is_undetermined():
    """A gated seed counts as meeting (a) only with its whole bootstrap interval >= keep_fraction, as missing it only
    with the whole interval below; a straddling seed leaves the share and is counted in the method: 6 of 6 seeds
    meeting it hold, but with one undetermined, 5 of 5 cannot clear 0.5 (lower bound 0.478)."""
    from papers.orion.report import build_claims, per_replicate, summarise

    acc, sweeps = [], []
    p = _params(seeds=6)
    for model in ("T", "R"):
        for seed in range(6):
            tag = {"model": model, "seed": seed, "n_layer": 4, "width": 32, "gate_step": 100, "routed": model == "R"}
            acc.append({**tag, "family": "story", "accuracy": 1.0, "answer_prob": 0.9, "prompts": 200})
            centre = 0.71 if (model == "T" and seed == 0) else 0.95  # seed 0 of T: near the cut
            r1c2 = np.random.default_rng(seed).normal(centre, 0.3, 100).clip(0, 2)
            sweeps.append(_pair_sweep(r1c2).assign(**tag, family="story", pairs=100, key_distance=3,
                                                   window_request_tokens=0))
    pairs = summarise(pd.DataFrame(acc), pd.concat(sweeps, ignore_index=True), 0.9, 0.5, (0.3, 0.5, 0.7))
    reps = per_replicate(p, pairs)
    t0 = reps[(reps.model == "T") & (reps.seed == 0)].iloc[0]
    assert t0.value_a_lo < 0.7 < t0.value_a_hi and t0.value_a >= 0.7 - 0.1
    claims = build_claims(p, pairs, NO_OVERSIGHT, SHARED)
    a = claims[0]
    assert a.evidence[0].replicates == 5 and "1 of 6 gated seeds undetermined" in a.evidence[0].method
    assert a.measured["undetermined_gated_seeds"] == {"T": 1, "R": 0}
    assert a.verdict == "inconclusive" and a.positive_control.verdict == "holds"
    by_floor = claims[1].measured["by_floor"]
    assert set(by_floor) == {"0.3", "0.5", "0.7"} and by_floor["0.3"]["R"]["met"] == 6


def test_training_device_setting():
    from papers.orion.stages import training_device

    assert training_device("cpu") == "cpu" and training_device("cuda") == "cuda"
    assert training_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError, match="orion.device"):
        parse({"device": "tpu"})
    assert parse({}).device == "cpu"


def test_listed_pretrained_lms_decide_and_the_tiny_models_are_reported_beside(tmp_path):
    """Issue 47's sixth review (full scale): where orion.pretrained lists LMs, the paper's setting decides (a) and (b)
    and the tiny trained models cannot veto it. Six pretrained LMs that all meet the criteria hold even beside a
    tiny model whose six seeds all miss them (which alone does not hold, and did veto before this change)."""
    from papers.orion.report import build_claims

    specs = []
    for i in range(6):
        (tmp_path / f"p{i}").mkdir()
        (tmp_path / f"p{i}" / "config.json").write_text("{}")
        specs.append({"name": f"P{i}", "path": str(tmp_path / f"p{i}")})
    tiny = _claim_inputs(NONE6, seeds=6)
    p_alone = _params(seeds=6)
    assert _verdicts(build_claims(p_alone, tiny, NO_OVERSIGHT, SHARED))[:2] == ["does not hold"] * 2
    good = _claim_inputs(ALL6, seeds=6)
    lms = good[good.model == "T"].assign(model=[f"P{i}" for i in good[good.model == "T"].seed], seed=0)
    p = parse({"seeds": 6, "models": MODELS, "families": ["story", "code"], "pretrained": specs})
    claims = build_claims(p, pd.concat([tiny, lms], ignore_index=True), NO_OVERSIGHT, SHARED)
    assert _verdicts(claims)[:2] == ["holds"] * 2
    for claim in claims[:2]:
        assert [part.name.split(":")[0] for part in claim.evidence] == ["pretrained LMs"]
    assert claims[0].measured["deciding_groups"] == ["pretrained LMs"]
    assert claims[0].measured["per_seed"]["T"] == [round(v, 3) for v in NONE6]  # still reported


@pytest.mark.parametrize("routed", [False, True])
def test_the_head_at_the_last_token_and_a_resumed_patch_are_the_full_passes(routed):
    """GPT.forward(at=pos) against the full logits read at pos, and patched_logits resumed from the clean streams
    (model.streams) against the patched pass from the embeddings, at every layer: bit for bit."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=23, block_size=32, n_layer=3, n_head=2, n_embd=16,
                    request_markers=(5,) if routed else ())
    model = GPT(cfg).eval()
    idx = torch.randint(1, 23, (4, 10))
    idx[:, 6] = 5
    idx[1, 8:] = 0
    pos = torch.tensor([9, 7, 9, 8])
    with torch.no_grad():
        full = model(idx)
    assert torch.equal(last_logits(model, idx, pos), full[torch.arange(4), pos])
    clean = model_lib.streams(model, idx)
    kept = [x.clone() for x in clean]
    vectors = torch.randn(4, 16)
    for layer in range(cfg.n_layer + 1):
        assert torch.equal(patched_logits(model, idx, pos, layer, vectors, clean=clean),
                           patched_logits(model, idx, pos, layer, vectors))
    assert not torch.equal(patched_logits(model, idx, pos, 1, vectors), last_logits(model, idx, pos))  # it patches
    # the patch is written into a copy: the clean streams, which the next patch resumes from, are left as they were
    # (review orion_r10's mutant M9: the write into the cached stream itself)
    assert all(torch.equal(x, y) for x, y in zip(clean, kept))


@pytest.mark.parametrize("routed", [False, True])
def test_word_lm_resumes_each_batch_from_its_own_clean_streams(routed):
    """WordLM keeps the clean streams of the batch it last patched (a sweep patches one batch at every layer):
    patching batch A, then batch B, then A again at every layer gives each batch's own patched pass from the
    embeddings, bit for bit (review orion_r10's mutant M2: a cache that does not check which batch it holds)."""
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=23, block_size=32, n_layer=3, n_head=2, n_embd=16,
                          request_markers=(5,) if routed else ())).eval()
    lm = WordLM(model, {f"t{i}": i for i in range(23)})
    words = [[f"t{int(i)}" for i in torch.randint(6, 23, (n,))] for n in (9, 7, 9, 8, 9, 9, 6, 8)]
    for w in words:
        w[3] = "t5"  # a request marker of the routed model (a plain token of the other)
    a, b = lm.encode(words[:4]), lm.encode(words[4:])
    assert a.ids.shape == b.ids.shape and not torch.equal(a.ids, b.ids)
    vectors = torch.randn(4, 16)
    for batch in (a, b, a):
        for layer in range(model.cfg.n_layer + 1):
            assert torch.equal(lm.patched_logits(batch, layer, vectors),
                               patched_logits(model, batch.ids, batch.pos, layer, vectors))


def _stage_inputs(tmp_path):
    """stages.prepare's held-out sets on a small vocabulary, and checkpoints of two untrained models (plain with a
    value window, and routed), 2 seeds each: seed 0's gate checkpoint another model at another step, seed 1's the
    analysed checkpoint itself (orion.train.post_gate_steps 0)."""
    from papers.orion import stages
    from papers.orion.params import BLOCK_SIZE

    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS) + "\n")
    cfg = {"words": str(words), "pool_size": 20, "numbers": 20, "test_prompts": 6, "patch_pairs": 5,
           "inject_prompts": 2, "val_prompts": 4, "seeds": 2, "families": ["story", "code"]}
    data = {k: tmp_path / f"{k}.{'json' if k == 'vocab' else 'parquet'}" for k in ("vocab", "test", "val", "pairs", "injection")}
    stages.prepare(cfg=cfg, **data)
    voc, _ = stages.read_vocab(data["vocab"])
    markers = tuple(voc.index[w] for w in tasks.request_markers(cfg["families"]))
    checkpoints = {}
    for name, extra in (("W", {"kv_window": 3}), ("R", {"request_markers": markers})):
        paths = checkpoints[name] = ([], [])
        for seed in range(2):
            for gate, path_list in ((False, paths[0]), (True, paths[1])):
                torch.manual_seed(100 * seed + (gate and seed == 0))
                model = GPT(GPTConfig(vocab_size=len(voc), block_size=BLOCK_SIZE, n_layer=3, n_head=2, n_embd=16,
                                      **extra))
                path_list.append(tmp_path / f"{name}_seed{seed}{'_gate' if gate else ''}.pt")
                step = 40 if gate and seed == 0 else 60
                model_lib.save(model, path_list[-1], step=step, checkpoint="gate" if gate else "analysed",
                               model_name=name, seed=seed, gate_step=40 if seed == 0 else 60, passed_gate=True)
    return cfg, data, checkpoints


def test_the_evaluate_stage_writes_the_full_analysis_rows_less_the_gate_control(tmp_path, monkeypatch):
    """stages.evaluate_trained (the orion_evaluate stage) against stages.evaluate, the full analysis of every
    checkpoint: the analysed checkpoints' accuracy and sweep are its rows, equal; at the gate, its accuracy rows and
    its sweep's request rows, without the same-request control (review orion_r10); a gate checkpoint that is its
    analysed checkpoint is not analysed again. The report reads the control-free sweep as it reads the full one,
    with the control's figures not measured."""
    from papers.orion import report, stages

    cfg, data, checkpoints = _stage_inputs(tmp_path)
    inputs = {k: data[k] for k in ("vocab", "test", "pairs")}
    analysed_once = stages._evaluate_one
    calls = []
    monkeypatch.setattr(stages, "_evaluate_one", lambda *a, **k: calls.append(k.get("control", True)) or analysed_once(*a, **k))
    for name, (analysed, gate) in checkpoints.items():
        assert not stages.same_checkpoint(analysed[0], gate[0]) and stages.same_checkpoint(analysed[1], gate[1])
        for key, value in (("step", 61), ("passed_gate", False)):  # the same weights at another point of training
            ckpt = torch.load(analysed[1], weights_only=False)
            torch.save({**ckpt, key: value}, tmp_path / "moved.pt")
            assert not stages.same_checkpoint(analysed[1], tmp_path / "moved.pt")
        out = {ref: {k: tmp_path / f"{name}_{ref}_{k}.parquet" for k in ("metrics", "sweep", "gate_metrics", "gate_sweep")}
               for ref in ("full", "stage")}
        stages.evaluate(cfg=cfg, model_name=name, checkpoints=analysed, gate_checkpoints=gate, **inputs, **out["full"])
        calls.clear()
        stages.evaluate_trained(cfg=cfg, model_name=name, checkpoints=analysed, gate_checkpoints=gate, **inputs,
                                **out["stage"])
        assert calls == [True, True, False]  # two analysed checkpoints with the control, one gate one without
        full, ours = ({k: pd.read_parquet(v) for k, v in out[ref].items()} for ref in ("full", "stage"))
        for k in ("metrics", "sweep", "gate_metrics"):
            pd.testing.assert_frame_equal(ours[k], full[k], check_exact=True)
        assert set(full["gate_sweep"].source) == {"request", patching.CONTROL} and set(ours["gate_sweep"].source) == {"request"}
        pd.testing.assert_frame_equal(ours["gate_sweep"], full["gate_sweep"][full["gate_sweep"].source == "request"]
                                      .reset_index(drop=True), check_exact=True)
        assert ours["gate_sweep"].window_request_tokens.gt(0).any() == (name == "W")  # the value window's reach

        p = parse(cfg)
        with_control, without = (report.summarise(full["gate_metrics"], s, 0.9, 0.1, (0.1, 0.2))
                                 for s in (full["gate_sweep"], ours["gate_sweep"]))
        assert with_control.control_measured.all() and not without.control_measured.any()
        for column in ("r1c2_max", "b_margin", "profile", "interior", "gated"):
            assert with_control[column].tolist() == without[column].tolist()
        for a, b in zip(with_control.a_draws, without.a_draws):
            assert np.array_equal(a, b)
        assert without.control_r1c2_max.isna().all() and without.control_a_draws.isna().all()
        reps = report.per_replicate(p, without)
        assert reps.control_a.isna().all() and reps.value_a.tolist() == report.per_replicate(p, with_control).value_a.tolist()
