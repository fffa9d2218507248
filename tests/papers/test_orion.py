"""P1 orion: the tasks' bookkeeping, the model's hooks against closed forms, request-patching on hand-built cases."""
import numpy as np
import pandas as pd
import pytest
import torch

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
    # a span of the last S tokens: S = 1 is the one-token patch; the whole sequence at layer 0 is the source's run
    span1 = residuals(model, idx1, pos1, span=1)
    torch.testing.assert_close(span1, res1)
    torch.testing.assert_close(patched_logits(model, idx2, pos2, 1, residuals(model, idx1, pos1, span=3)[1][:, -1:]),
                               patched_logits(model, idx2, pos2, 1, res1[1]))
    whole = residuals(model, idx1, torch.full((4,), 9), span=10)  # (L + 1, B, 10, C): every token of idx1
    assert whole.shape == (4, 4, 10, 16)
    torch.testing.assert_close(patched_logits(model, idx1[:, :10] * 0 + 1, torch.full((4,), 9), 0, whole[0]),
                               last_logits(model, idx1, torch.full((4,), 9)), rtol=1e-5, atol=1e-5)
    # the span's states are the tokens' own: the second-to-last token's state is that token's residual
    torch.testing.assert_close(residuals(model, idx1, pos1, span=2)[:, :, 0], residuals(model, idx1, pos1 - 1))
    with pytest.raises(ValueError, match="at least 7 tokens"):
        residuals(model, idx1, pos1, span=7)  # the third sequence has 6


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


def _claim_inputs(shares, seeds=3, families=("story", "code"), gated=True, control=0):
    """A pairs table as summarise() writes it, for one size L4: per seed, the first `shares[s]` families keep
    R1(C2) and show the interior profile; the first `control` families do so under the control patch too."""
    pairs = []
    for seed in range(seeds):
        for i, fam in enumerate(families):
            good = i < shares[seed]
            pairs.append({"model": "L4", "seed": seed, "family": fam, "n_layer": 4, "width": 32, "gate_step": 100,
                          "accuracy": 1.0 if gated else 0.5, "gated": gated, "r1c2_max": 0.9 if good else 0.1,
                          "r1c2_layer": 2, "depth": 0.5, "profile": "", "decomposition": good, "interior": good,
                          "ends_by_construction": True, "control_r1c2_max": 0.9 if i < control else 0.1,
                          "control_interior": i < control})
    return pd.DataFrame(pairs)


def test_claims_decide_on_seeds_count_pairs_below_the_gate_and_use_the_control():
    from papers.orion.stages import _claims, summarise_oversight

    p = parse({"seeds": 3})
    none = summarise_oversight(pd.DataFrame(columns=["model", "chosen_layer", "n_layer", "condition", "trusted", "layer"]))
    verdicts = lambda claims: [c.verdict for c in claims]  # noqa: E731
    assert verdicts(_claims(p, _claim_inputs([2, 2, 2]), none)) == ["holds", "holds", "not measured"]
    assert verdicts(_claims(p, _claim_inputs([0, 0, 0]), none))[:2] == ["does not hold"] * 2
    straddles = _claims(p, _claim_inputs([2, 0, 2]), none)
    assert verdicts(straddles)[:2] == ["inconclusive"] * 2
    # a share's interval stays in [0, 1] (the t interval of 1, 0, 1 alone runs from -0.77 to 2.1)
    assert all(part.interval == (0.0, 1.0) for c in straddles[:2] for part in c.evidence)
    # pairs below the gate can neither make a claim hold nor fail, whatever their patching shows
    for shares in ([2, 2, 2], [0, 0, 0]):
        below = _claims(p, _claim_inputs(shares, gated=False), none)
        assert verdicts(below)[:2] == ["inconclusive"] * 2 and "did not reach the accuracy gate" in below[0].note
    # a control that holds too makes the test vacuous
    vacuous = _claims(p, _claim_inputs([2, 2, 2], control=2), none)
    assert [c.control.verdict for c in vacuous[:2]] == ["holds"] * 2 and verdicts(vacuous)[:2] == ["inconclusive"] * 2
    assert all(c.control.verdict == "does not hold" for c in _claims(p, _claim_inputs([2, 2, 2]), none)[:2])
    one = _claims(parse({}), _claim_inputs([2], seeds=1), none)  # one seed: never a verdict either way
    assert verdicts(one)[:2] == ["inconclusive"] * 2 and all("replicate" in c.note for c in one[:2])
    assert "no pretrained LM" in one[2].note


def test_the_report_counts_gated_pairs_whose_request_does_not_move():
    from papers.orion.stages import _gated_outcome

    pairs = _claim_inputs([1, 1, 1], seeds=3)
    pairs["profile"] = ["R2(C2) > R2(C2) > R2(C2) > R2(C2) > R1(C1)", "R2(C2) > R1(C2) > R1(C1) > R1(C1) > R1(C1)"] * 3
    pairs.loc[pairs.seed == 2, "gated"] = False  # not counted: the model does not do its task
    assert "Of the 4 pairs past the gate, 2 keep R2(C2) dominant at every interior layer" in _gated_outcome(pairs)
    assert _gated_outcome(pairs.assign(gated=False)).startswith("No pair passed the gate")


def test_claim_c_on_pretrained_models_against_the_other_request_control():
    from papers.orion.stages import _claims

    over = pd.DataFrame({"model": ["a", "b", "c"], "seed": 0, "n_layer": 12, "layer": 6, "before": [0.1, 0.2, 0.15],
                         "after": [0.9, 0.95, 0.97], "after_other": [0.1, 0.2, 0.1]})
    c = _claims(parse({"seeds": 3}), _claim_inputs([2, 2, 2]), over)[2]
    assert c.verdict == "holds" and c.control.verdict == "does not hold"
    assert c.evidence.effect == pytest.approx(np.mean([0.8, 0.75, 0.82]))


def test_request_patching_on_a_model_that_ignores_the_context():
    """A model whose last-token output depends on nothing but the last token's own state: patching at any
    layer >= 0 moves x1's output, so R1(C1) is kept fully and the normalised values are exact ratios."""
    vocab = {t: i for i, t in enumerate(["<pad>", "a", "b", "c", "d", "q"])}

    class Echo(torch.nn.Module):  # logits = the residual itself (V = C); hook sees the one-hot embedding
        cfg = GPTConfig(vocab_size=6, block_size=8, n_layer=1, n_head=1, n_embd=6)

        def forward(self, idx, hook=None):
            x = torch.nn.functional.one_hot(idx, 6).float() * 5.0
            for layer in (0, 1):
                x = hook(layer, x) if hook is not None else x
            return x

    pairs = pd.DataFrame({"x1": ["a b c"], "x2": ["b c d"], "x21": ["b c c"], "r1c1": ["c"], "r2c2": ["d"], "r1c2": ["a"]})
    sweep = patching.request_patching(WordLM(Echo(), vocab), pairs)
    p_top = np.exp(5) / (np.exp(5) + 5)
    # the control patches x1's state at a position of its first half: here position 0, the token "a"
    control = sweep[sweep.source == "shuffled"].set_index(["layer", "hypothesis"])
    assert control.loc[(1, "R1(C2)"), "accuracy"] == 1.0 and control.loc[(1, "R1(C1)"), "accuracy"] == 0.0
    r = sweep[sweep.source == "request"].set_index(["layer", "hypothesis"])
    assert r.loc[(1, "R1(C1)"), "normalized"] == pytest.approx(1.0)
    assert r.loc[(0, "R1(C1)"), "prob"] == pytest.approx(p_top)
    assert r.loc[(0, "R2(C2)"), "clean_prob"] == pytest.approx(p_top)
    assert r.loc[(0, "R2(C2)"), "accuracy"] == 0.0
    # the window-span diagnostic: only the last token's state matters to this model, so patching the last two
    # tokens gives the one-token patch's numbers
    spans = patching.request_patching(WordLM(Echo(), vocab), pairs, span=2)
    by_source = {s: g.drop(columns="source").reset_index(drop=True) for s, g in spans.groupby("source")}
    assert set(by_source) == {"request", "shuffled", "span"} and "span" not in set(sweep.source)
    pd.testing.assert_frame_equal(by_source["span"], by_source["request"])


def test_params_parse_and_checks():
    p = parse({})
    assert p.claims.gate_accuracy == 0.9 and p.claims.keep_fraction == 0.7
    with pytest.raises(ValueError, match="inject_key"):
        parse({"inject_key": "color"})
    with pytest.raises(ValueError, match="multiple of n_head"):
        parse({"models": [{"name": "bad", "n_layer": 2, "n_embd": 30, "n_head": 4}]})
    with pytest.raises(ValueError, match="kv_window"):
        parse({"models": [{"name": "bad", "n_layer": 2, "n_embd": 32, "n_head": 4, "kv_window": 0}]})
    with pytest.raises(ValueError, match="copy_length"):
        parse({"train": {"copy_length": [9, 3]}})
    with pytest.raises(ValueError, match="length_buckets"):
        parse({"train": {"batch_size": 4, "length_buckets": 5}})
    with pytest.raises(KeyError, match="orion.nope"):
        parse({"nope": 1})
