"""P7 cbplm: the bottleneck's algebra, the losses, the attention mask, the concepts against hand
computations, the intervention on a hand-built model whose answer is known, and the loaders."""
import numpy as np
import pandas as pd
import pytest
import torch

from papers.cbplm import data as D
from papers.cbplm import tokens as T
from papers.cbplm import evaluate as E
from papers.cbplm.model import ConceptBottleneckLM, Encoder, MaskedLM, concept_loss, orthogonality_loss
from papers.cbplm.params import parse
from papers.cbplm.stages import weight_checks
from papers.cbplm.train import length_batches, lr_lambda

K, E_W = 3, 2


def tiny_cb(seed=0):
    torch.manual_seed(seed)
    return ConceptBottleneckLM(T.vocab_size(K, 4), 40, 16, 1, 2, 32, n_concepts=K, concept_emb=E_W).eval()


def test_bottleneck_is_linear_in_each_concept():
    # logits = W_dec [c_1 e_1, .., c_K e_K, z_u] + b: raising c_k by delta moves every position's
    # logits by delta * (W_dec block k) e_k, which concept_token_weights returns.
    model = tiny_cb()
    tokens, _ = T.encode(["ACDKLW", "MKV"])
    c = torch.randn(2, K)
    delta = 1.7
    with torch.no_grad():
        base = model(tokens, concepts=c)["logits"]
        for k in range(K):
            moved = model(tokens, concepts=c, intervene=(k, c[:, k] + delta))["logits"]
            expected = delta * model.concept_token_weights()[:, k]
            torch.testing.assert_close(moved - base, expected.expand_as(base), atol=1e-5, rtol=1e-5)


def test_teacher_forcing_and_intervention_only_touch_their_concept():
    model = tiny_cb()
    tokens, _ = T.encode(["ACDKLW"])
    with torch.no_grad():
        out = model(tokens)
        c_hat = out["concepts"]
        forced = model(tokens, concepts=c_hat)  # feeding the prediction back changes nothing
        torch.testing.assert_close(forced["logits"], out["logits"])
        iv = model(tokens, intervene=(1, torch.tensor([5.0])))
    z_c = iv["z_c"][0, 0].view(K, E_W)
    want = torch.cat([c_hat[0, :1], torch.tensor([5.0]), c_hat[0, 2:]])[:, None] * model.concept_emb
    torch.testing.assert_close(z_c, want)


def test_losses_by_hand():
    a = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    b = torch.tensor([[[0.0, 3.0], [-2.0, -2.0]]])
    assert orthogonality_loss(a, b).item() == pytest.approx(0.5)  # |cos| = 0 and 1
    c_hat, c = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1.0, 0.0, 0.0]])
    assert concept_loss(c_hat, c).item() == pytest.approx(3 * (0 + 4 + 9) / 3)  # K * MSE


def test_padding_does_not_change_real_positions():
    torch.manual_seed(0)
    enc = Encoder(T.vocab_size(K, 4), 40, 16, 2, 2, 32).eval()
    short, _ = T.encode(["ACDKLW"])
    padded, _ = T.encode(["ACDKLW", "ACDKLWMMMMMMMMM"])
    with torch.no_grad():
        torch.testing.assert_close(enc(short)[0], enc(padded)[0, : short.shape[1]], atol=1e-5, rtol=1e-5)


def test_block_attention_matches_sdpa():
    # Our block through kernels.attention against torch's scaled_dot_product_attention.
    torch.manual_seed(1)
    enc = Encoder(T.vocab_size(K, 4), 40, 16, 1, 2, 32).eval()
    tokens, _ = T.encode(["ACDKLW", "MKVAAAAAAA"])
    block = enc.blocks[0]
    x = torch.randn(2, tokens.shape[1], 16)
    keep = (tokens != T.PAD)[:, None, None, :]
    with torch.no_grad():
        got = block(x, keep)
        q, k, v = block.qkv(block.ln_1(x)).split(16, dim=2)
        q, k, v = (t.view(2, -1, 2, 8).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        h = x + block.proj(y.transpose(1, 2).reshape(2, -1, 16))
        want = h + block.ff(block.ln_2(h))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_encode_decode_and_masks():
    tags = T.tag_token(np.arange(K)[None, :], np.array([[0, 3, 1]]), 4)
    tokens, n_prefix = T.encode(["MKW"], tags)
    assert n_prefix == 1 + K
    assert tokens[0].tolist() == [T.CLS, *tags[0].tolist(), 4 + 10, 4 + 8, 4 + 18, T.EOS]
    assert T.decode(tokens, n_prefix, [3]) == ["MKW"]
    mask = T.draw_mask(tokens, 1.0, torch.Generator().manual_seed(0))
    assert mask[0].tolist() == [False] * (1 + K) + [True] * 3 + [False]  # residues only


def test_concepts_by_hand():
    seq = "AKDEFWY"
    gravy, charge, arom, helix = D.concept_values(seq, ["gravy", "charge", "aromaticity", "helix_fraction"])
    kd = dict(zip(D.AMINO_ACIDS, D.kyte_doolittle()))
    assert gravy == pytest.approx(np.mean([kd[a] for a in seq]))
    assert arom == pytest.approx(3 / 7)  # F, W, Y
    assert helix == pytest.approx(3 / 7)  # A, K, E of E, M, A, L, K
    assert D.concept_values("KKKKRRRR", ["charge"])[0] > 7 > 0 > D.concept_values("DDDDEEEE", ["charge"])[0] + 7
    assert kd["I"] == 4.5 and kd["R"] == -4.5  # Kyte & Doolittle 1982


def test_intervention_on_a_hand_built_model_regenerates_the_known_residues():
    # Decoder reads only concept 0 (embedding [1, 0]) with weights = Kyte-Doolittle: setting the
    # concept to +2 makes I (most hydrophobic) the argmax at every masked position, -2 makes R.
    model = tiny_cb()
    with torch.no_grad():
        model.decoder.weight.zero_()
        model.decoder.bias.zero_()
        model.concept_emb.copy_(torch.tensor([[1.0, 0.0]] * K))
        model.decoder.weight[:, 0] = torch.tensor(D.kyte_doolittle(), dtype=torch.float32)
    seqs = np.array(["ACDEFGHKLM", "NPQRSTVWY"], dtype=object)
    masks = [np.array([1, 0, 1, 0, 0, 0, 0, 0, 0, 1], bool), np.array([0, 1, 0, 0, 0, 0, 0, 0, 1], bool)]
    bins = np.zeros((2, K), dtype=np.int64)
    up = E.regenerate(model, "cb", seqs, bins, masks, 4, concept=0, target=2.0)
    down = E.regenerate(model, "cb", seqs, bins, masks, 4, concept=0, target=-2.0)
    assert up == ["ICIEFGHKLI", "NIQRSTVWI"]
    assert down == ["RCREFGHKLR", "NRQRSTVWR"]
    # The change in GRAVY, measured as the intervention measures it, is positive up and down.
    z = np.zeros((2, 1))
    iv = E.intervene({"cb": model}, seqs, z + D.concept_matrix(seqs, ["gravy"]), bins[:, :1], masks, ["gravy"],
                     np.zeros(1), np.ones(1), np.zeros((3, 1)), 2.0, 4)
    assert (iv.delta > 0).all() and set(iv.changed) == {3, 2}


def test_tag_model_reads_its_prefix():
    # The tag model's intervention rewrites the tag token of the targeted concept only.
    torch.manual_seed(0)
    model = MaskedLM(T.vocab_size(K, 4), 40, 16, 1, 2, 32).eval()
    seen = []
    model.encoder.tok.register_forward_hook(lambda m, i, o: seen.append(i[0].clone()))
    E.regenerate(model, "tag", np.array(["ACDE"], dtype=object), np.array([[1, 1, 1]]), [np.array([1, 0, 0, 0], bool)],
                 4, concept=2, target_bin=3)
    assert seen[0][0, 1:4].tolist() == T.tag_token(np.arange(3), np.array([1, 1, 3]), 4).tolist()


def test_r_squared_and_weight_checks():
    true = np.random.default_rng(0).normal(size=(50, 2))
    np.testing.assert_allclose(E.r_squared(true, true), 1.0)
    np.testing.assert_allclose(E.r_squared(np.zeros_like(true) + true.mean(0), true), 0.0, atol=1e-12)
    kd = D.kyte_doolittle()
    charge = np.array([{"K": 1.0, "R": 2.0, "D": -1.0, "E": -3.0}.get(a, 0.0) for a in D.AMINO_ACIDS])
    w = pd.DataFrame({"seed": 0, "concept": ["gravy"] * 20 + ["charge"] * 20, "residue": list(D.AMINO_ACIDS) * 2,
                      "weight": np.r_[kd * 2, charge], "kyte_doolittle": np.r_[kd, kd]})
    row = weight_checks(w).iloc[0]
    assert row.kd_spearman == pytest.approx(1.0) and row.charge_signs_right == 4


def test_loaders_name_file_and_line(tmp_path):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("entry\tsequence\nA\tMKV\nB\t\n")
    with pytest.raises(ValueError, match=r"bad.tsv: line 3"):
        D.load_sequences(tsv)
    fasta = tmp_path / "bad.fasta"
    fasta.write_text("MKV\n>x\nAAA\n")
    with pytest.raises(ValueError, match=r"bad.fasta: line 1"):
        D.load_sequences(fasta)
    good = tmp_path / "good.fasta"
    good.write_text(">a\nMKV\nLL\n>b\nAXA\n")
    df = D.load_sequences(good)
    assert df.sequence.tolist() == ["MKVLL", "AXA"] and df.line.tolist() == [1, 4]
    assert D.standard_only(pd.Series(["MKV", "AXA", "MK!V", "mkv"])).tolist() == [True, False, False, False]


def test_packaged_sequences_are_real_proteins():
    df = D.load_sequences(None, ["SEQ_LOCATION"])
    assert len(df) == 1835 and df.sequence.str.len().median() > 100


def test_batches_lr_and_params():
    batches = length_batches(np.arange(103) % 17 + 5, 8, np.random.default_rng(0), pool=3)
    assert sorted(np.concatenate(batches).tolist()) == list(range(103))
    assert lr_lambda(0, 10, 100) == pytest.approx(0.1) and lr_lambda(10, 10, 100) == pytest.approx(1.0)
    assert lr_lambda(100, 10, 100) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="isoelectric_point"):
        parse({"concepts": ["gravy", "charge", "isoelectric_point"]})
    with pytest.raises(ValueError, match="gravy"):
        parse({"concepts": ["charge", "aromaticity"]})


def test_unigram_perplexity_by_hand():
    got = E.unigram_perplexity(["AAAC"], ["AC", "CA"], [np.array([True, True]), np.array([False, True])])
    f_a, f_c = (3 + 1) / 24, (1 + 1) / 24  # add-one smoothing over the 20 residues
    assert got == pytest.approx(np.exp(-(np.log(f_a) + np.log(f_c) + np.log(f_a)) / 3))


# ---- claims (the verdict contract) -------------------------------------------------------------------
def _claim_inputs(cb_change, tag_change, ppl, seeds=(0, 1, 2), n_seq=40, gravy_scale=2.0):
    """Synthetic report inputs: per-seed changes with small per-sequence noise, perplexities, weights."""
    from papers.cbplm.stages import weight_checks

    rng = np.random.default_rng(1)
    p = parse({})
    names = list(p.concepts)
    change = pd.DataFrame([{"seed": s, "model": kind, "concept": c, "sequence": i,
                            "change": mu + 0.05 * rng.normal() + 0.02 * s}
                           for s in seeds for kind, mu in (("cb", cb_change), ("tag", tag_change), ("plain", 0.0))
                           for c in names for i in range(n_seq)])
    change.loc[change.model == "plain", "change"] = 0.0
    m = pd.DataFrame([{"seed": s, "model": kind, "metric": "perplexity", "concept": "", "value": v * (1 + 0.002 * s)}
                      for s in seeds for kind, v in ppl.items()])
    kd = D.kyte_doolittle()
    charge = np.array([{"K": 1.0, "R": 2.0, "D": -1.0, "E": -3.0}.get(a, 0.0) for a in D.AMINO_ACIDS])
    w = pd.concat([pd.DataFrame({"seed": s, "concept": ["gravy"] * 20 + ["charge"] * 20,
                                 "residue": list(D.AMINO_ACIDS) * 2,
                                 "weight": np.r_[kd * gravy_scale + rng.normal(0, 0.3, 20), charge + 0.1 * s],
                                 "kyte_doolittle": np.r_[kd, kd]}) for s in seeds])
    return p, m, change, w, weight_checks(w)


def test_claims_hold_with_their_controls_failing():
    from papers.cbplm.stages import cbplm_claims

    p, m, change, w, checks = _claim_inputs(1.0, 0.1, {"cb": 17.5, "plain": 17.4, "tag": 17.4, "unigram": 19.5})
    a, b, c = cbplm_claims(p, m, change, w, checks)
    assert [x.verdict for x in (a, b, c)] == ["holds"] * 3
    assert a.control.verdict != "holds" and b.control.verdict == "does not hold" and c.control.verdict != "holds"


def test_claims_fail_and_stay_inconclusive_where_they_should():
    from papers.cbplm.stages import cbplm_claims, shuffled_change

    # CB moves 1.0 SD, the tag model 0.8: CB - 2 x tag < 0 in every seed, so (a) does not hold;
    # CB-pLM 20% worse than the plain LM: (b) does not hold.
    p, m, change, w, checks = _claim_inputs(1.0, 0.8, {"cb": 21.0, "plain": 17.4, "tag": 17.4, "unigram": 19.5})
    a, b, _ = cbplm_claims(p, m, change, w, checks)
    assert a.verdict == "does not hold" and b.verdict == "does not hold"
    # One seed: never more than inconclusive.
    p, m, change, w, checks = _claim_inputs(1.0, 0.1, {"cb": 17.5, "plain": 17.4, "tag": 17.4, "unigram": 19.5},
                                            seeds=(0,))
    assert {x.verdict for x in cbplm_claims(p, m, change, w, checks)} == {"inconclusive"}
    # The shuffled control keeps each change's size, flips signs at random, and is reproducible.
    s1, s2 = shuffled_change(change), shuffled_change(change)
    np.testing.assert_array_equal(s1.change, s2.change)
    np.testing.assert_allclose(s1.change.abs(), change.change.abs())
    cb = (change.model == "cb").to_numpy()
    assert 0.4 < (np.sign(s1.change[cb]) != np.sign(change.change[cb])).mean() < 0.6
