"""P16 hip on a pretrained causal LM (papers.hip.pretrained): the attention function registered with
transformers against the model's own eager attention and against a by-hand masked softmax over the blocks
papers.hip.methods picks, on a tiny random LLaMA-style model written to a local directory (the full scale points
at a real one; nothing is downloaded)."""
import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from papers.hip import methods, pretrained, report
from papers.hip.methods import HiPConfig
from papers.hip.params import MULTIKEY_WORDS, parse

N_LAYER = 3


def _write_llama(path, seed=0):
    """A random LLaMA (3 layers, width 32, 4 query heads over 2 key/value heads) and a byte-level tokenizer
    with no merges (every text tokenises, one token per byte), saved as save_pretrained writes them."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {w: i for i, w in enumerate(["<pad>", "<s>", *alphabet])}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders
    tok.decoder = decoders.ByteLevel()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=N_LAYER,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=1,
                      eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger q, k projections than the init: peaked attention, so pruning shows
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    model.save_pretrained(path)
    wrapped.save_pretrained(path)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    _write_llama(path)
    return path


def _eager(path):
    model, tok = pretrained.load(path)
    model.set_attn_implementation("eager")
    return model, tok


def _ids(T, seed=1):
    return torch.randint(2, 200, (1, T), generator=torch.Generator().manual_seed(seed))


FULL = HiPConfig(block_q=16, block_stride_q=2, block_k=2, mask_k=64, sink=4, window=16, dense_layers=0)
SMALL = HiPConfig(block_q=16, block_stride_q=2, block_k=2, mask_k=8, sink=2, window=8, dense_layers=1)


@pytest.mark.parametrize("method", methods.METHODS)
def test_full_budget_equals_the_models_own_attention(llama_dir, method):
    """With mask_k covering the whole context (T = 48 <= mask_k), every method keeps every causal key: the
    patched model's logits are the unpatched (eager) model's."""
    model, _ = _eager(llama_dir)
    ids = _ids(48)
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        pretrained.patch(model, method, FULL, torch.Generator().manual_seed(0))
        got = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ["hip", "random", "window"])
def test_small_budget_prunes_only_after_the_dense_layers(llama_dir, method):
    """dense_layers = 1 and a budget of 2 + 8 + 8 keys at T = 128: layer 0's output is exact, the last
    layer's is not."""
    model, _ = _eager(llama_dir)
    ids = _ids(128)
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states
        pretrained.patch(model, method, SMALL, torch.Generator().manual_seed(0))
        got = model(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states
    torch.testing.assert_close(got[1], ref[1], atol=1e-5, rtol=1e-5)
    assert (got[N_LAYER] - ref[N_LAYER]).abs().max() > 1e-2


def _by_hand(q, k, v, blocks, cfg, scale):
    """softmax(s q k^T) v over keys j <= i whose block j // block_k is among query i's blocks (a dense mask)."""
    T = q.shape[2]
    allowed = torch.zeros(*q.shape[:2], T, T, dtype=torch.bool)
    for i in range(T):
        row = blocks[:, :, i // cfg.block_q]  # (B, H, S)
        for j in range(i + 1):
            allowed[:, :, i, j] = (row == j // cfg.block_k).any(-1)
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("method", ["hip", "oracle", "window"])
def test_registered_function_is_the_methods_selection_applied_by_hand(method):
    """Random q (4 heads), k, v (2 grouped heads), T = 80: the registered function equals a by-hand masked softmax
    over methods.select's blocks on the repeated keys, with the model's scaling."""
    from transformers import AttentionInterface

    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 4, 80, 8, generator=g), torch.randn(1, 2, 80, 8, generator=g), torch.randn(1, 2, 80, 8, generator=g)
    cfg = HiPConfig(block_q=16, block_stride_q=2, block_k=2, mask_k=8, sink=2, window=8, dense_layers=1)
    fn = AttentionInterface._global_mapping[pretrained.register(method, cfg)]
    module = torch.nn.Module()
    module.layer_idx = 1
    out, weights = fn(module, q, k, v, None, scaling=0.3)
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    blocks = methods.select(method, q, kr, cfg)
    assert weights is None and out.shape == (1, 80, 4, 8)
    torch.testing.assert_close(out, _by_hand(q, kr, vr, blocks, cfg, 0.3).transpose(1, 2), atol=1e-5, rtol=1e-5)
    module.layer_idx = 0  # a dense layer: the plain causal softmax
    dense, _ = fn(module, q, k, v, None, scaling=0.3)
    causal = torch.ones(80, 80, dtype=torch.bool).tril()
    ref = torch.softmax((q @ kr.transpose(-1, -2) * 0.3).masked_fill(~causal, float("-inf")), -1) @ vr
    torch.testing.assert_close(dense, ref.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_bad_path_names_the_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hip\.pretrained"):
        pretrained.load(tmp_path / "no_model")


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 1.0])
def test_passkey_prompt_puts_the_key_at_the_depth(llama_dir, depth):
    _, tok = pretrained.load(llama_dir)
    text, actual = pretrained.passkey_prompt(tok, 1200, depth, "48213")
    needle = pretrained.NEEDLE.format(key="48213")
    head, tail = text.split(needle)
    before, after = head.count(pretrained.FILLER), tail.count(pretrained.FILLER)
    n = before + after
    assert text.count("48213") == 2 and n > 5
    assert actual == before / n and abs(before / n - depth) <= 0.5 / n
    assert abs(len(tok(text).input_ids) - 1200) <= len(pretrained.FILLER)
    assert text.endswith(pretrained.QUESTION)


def test_stage_writes_every_method(llama_dir, tmp_path):
    """The evaluate stage end to end: documents, passkey and multi-key rows for every method, each accuracy row
    with its method's paired difference to dense; dense's document NLL equals the unpatched model's own loss on the
    same window; the report's table shows the differences."""
    doc = tmp_path / "doc.txt"
    doc.write_text("In the beginning God created the heaven and the earth. " * 20)
    cfg = {"device": "cpu", "hip": dict(vars(SMALL)), "pretrained": [{"name": "tiny", "path": str(llama_dir)}],
           "pretrained_eval": {"documents": str(doc), "lengths": [320], "depths": [0.5], "prompts": 1, "windows": 2,
                               "seed": 0, "bootstrap": 200,
                               "multikey": {"needles": 2, "prompts": 2, "lengths": [480], "depths": [0.2, 0.8]}}}
    out = tmp_path / "tiny.parquet"
    pretrained.evaluate(cfg=cfg, model_name="tiny", table=out)
    df = pd.read_parquet(out)
    assert set(df.method) == set(methods.METHODS)
    assert (df[df.task == "documents"].groupby("method").size() == 2).all()
    assert (df[df.task == "passkey"].groupby("method").size() == 1).all()
    assert (df[df.task == "multikey"].groupby("method").size() == 4).all()
    # the paired differences to dense: on every accuracy row, none on the document rows; dense's own is 0 [0, 0]
    acc = df[df.task.isin(["passkey", "multikey"])]
    assert acc[["diff_vs_dense", "ci_low", "ci_high"]].notna().all().all()
    assert df[df.task == "documents"][["diff_vs_dense", "ci_low", "ci_high"]].isna().all().all()
    assert (acc[acc.method == "dense"][["diff_vs_dense", "ci_low", "ci_high"]] == 0).all().all()
    assert ((acc.ci_low <= acc.diff_vs_dense + 1e-12) & (acc.diff_vs_dense <= acc.ci_high + 1e-12)).all()
    for (task, method), g in acc.groupby(["task", "method"]):  # the diff is the accuracy gap on the same prompts
        dense = acc[(acc.task == task) & (acc.method == "dense")].set_index(["depth", "prompt"]).correct
        gap = (g.set_index(["depth", "prompt"]).correct - dense).mean()
        assert g.diff_vs_dense.iloc[0] == pytest.approx(gap)
    model, tok = _eager(llama_dir)
    ids = torch.tensor(tok(doc.read_text(), add_special_tokens=False).input_ids[:320])
    with torch.no_grad():
        ref = model(input_ids=ids[None], labels=ids[None], use_cache=False).loss
    dense = df[(df.task == "documents") & (df.method == "dense") & (df.window == 0)].nll.item()
    assert dense == pytest.approx(float(ref), abs=1e-5)
    summary = report.pretrained_summary(df)  # the report's table: one row per method, means of the rows above
    hip = df[(df.method == "hip") & (df.task == "documents")].nll.mean()
    assert f"| tiny | hip | 320 | {hip:.3f} |" in summary and summary.count("| tiny |") == 2 * len(methods.METHODS)
    assert "| tiny | hip | 480 | - | - | - | - |" in summary  # the multi-key-only length: no NLL, no passkey
    mk = acc[(acc.method == "hip") & (acc.task == "multikey")].iloc[0]
    assert f"{mk.diff_vs_dense:+.2f} [{mk.ci_low:+.2f}, {mk.ci_high:+.2f}] |" in summary
    assert "| tiny | dense | 480 | - | - | - | - |" in summary and "+0.00 [+0.00, +0.00] |" in summary


# ---- multi-key retrieval (RULER's niah_multikey) ----------------------------------------------------
def _needles(n, depth, seed=0):
    return pretrained.draw_needles(np.random.default_rng(seed), n, depth)


@pytest.mark.parametrize("depth", [0.0, 0.3, 1.0])
def test_multikey_prompt_puts_every_needle_at_its_depth(llama_dir, depth):
    """Closed form: needle i sits after round(depth_i n) of the n filler repetitions (so within 0.5 / n of its asked
    depth), every needle once, and the question asks for needle 0's key, whose value is the one answer."""
    _, tok = pretrained.load(llama_dir)
    needles = _needles(4, depth)
    text, actual = pretrained.multikey_prompt(tok, 1500, needles)
    assert text.startswith(pretrained.MULTIKEY_INTRO)
    assert text.endswith(pretrained.MULTIKEY_QUESTION.format(key=needles[0]["key"]))
    n = text.count(pretrained.FILLER)
    assert n > 10 and abs(len(tok(text).input_ids) - 1500) <= len(pretrained.FILLER)
    assert abs(actual[0] - depth) <= 0.5 / n
    for nd, got in zip(needles, actual):
        sentence = pretrained.MULTIKEY_NEEDLE.format(key=nd["key"], value=nd["value"])
        assert text.count(sentence) == 1 and text.count(nd["value"]) == 1
        before = text.split(sentence)[0].count(pretrained.FILLER)
        assert got == before / n == round(nd["depth"] * n) / n
    asked = text.rsplit("magic number for ", 1)[1].split(" is:")[0]
    assert asked == needles[0]["key"] and [nd["key"] for nd in needles].count(asked) == 1


def test_needles_are_distinct_spread_and_seeded():
    """Distinct words and 7-digit values; the asked needle at the asked depth; one distractor per stratum of [0, 1];
    the same seed draws the same needles."""
    needles = _needles(5, 0.42, seed=3)
    assert needles == _needles(5, 0.42, seed=3) and needles != _needles(5, 0.42, seed=4)
    assert len({nd["key"] for nd in needles}) == 5 and len({nd["value"] for nd in needles}) == 5
    assert all(len(nd["value"]) == pretrained.VALUE_DIGITS and nd["value"].isdigit() for nd in needles)
    assert needles[0]["depth"] == 0.42
    assert [int(nd["depth"] * 4) for nd in needles[1:]] == [0, 1, 2, 3]
    assert len(pretrained.KEY_WORDS) == len(set(pretrained.KEY_WORDS)) == MULTIKEY_WORDS


def test_multikey_prompt_too_long_for_its_length_names_the_key(llama_dir):
    _, tok = pretrained.load(llama_dir)
    with pytest.raises(ValueError, match=r"hip\.pretrained_eval\.multikey\.lengths"):
        pretrained.multikey_prompt(tok, 100, _needles(3, 0.5))


@pytest.mark.parametrize("key, value, match", [
    ("needles", 0, r"multikey\.needles must be an integer >= 1"),
    ("needles", MULTIKEY_WORDS + 1, r"multikey\.needles .* exceeds"),
    ("depths", [0.5, 1.2], r"multikey\.depths must be"),
    ("lengths", [], r"multikey\.lengths must be"),
    ("prompts", 1.5, r"multikey\.prompts must be an integer"),
])
def test_bad_multikey_values_name_the_key(key, value, match):
    ev = {"multikey": {key: value}}
    with pytest.raises(ValueError, match=match):
        parse({"pretrained_eval": ev})


def test_too_few_bootstrap_resamples_name_the_key():
    with pytest.raises(ValueError, match=r"hip\.pretrained_eval\.bootstrap"):
        parse({"pretrained_eval": {"bootstrap": 10}})


BIG = HiPConfig(block_q=16, block_stride_q=2, block_k=2, mask_k=512, sink=4, window=16, dense_layers=0)


def test_full_budget_multikey_answers_equal_dense(llama_dir):
    """At T <= mask_k every method keeps every causal key (as in the logits test above), so each method's greedy
    multi-key answers are dense's, prompt for prompt."""
    model, tok = pretrained.load(llama_dir)
    ev = parse({"pretrained_eval": {"lengths": [4096], "multikey": {"needles": 3, "prompts": 1, "lengths": [500],
                                                                    "depths": [0.25, 0.75]}}}).pretrained_eval
    needles = pretrained.needle_sets(ev)
    answers = {}
    for method in methods.METHODS:
        pretrained.patch(model, method, BIG, torch.Generator().manual_seed(0))
        rows = pretrained.retrieval_rows(model, tok, ev, 500, [], needles, "cpu")
        longest = max(r["tokens"] for r in rows) + pretrained.VALUE_DIGITS + 3  # the prompt and its decoded answer
        assert len(rows) == 2 and {r["task"] for r in rows} == {"multikey"} and longest <= BIG.mask_k
        answers[method] = [r["answer"] for r in rows]
    assert any(answers["dense"])  # the random model does emit digits, so equality is not '' == ''
    for method in methods.METHODS:
        assert answers[method] == answers["dense"], method


# ---- paired bootstrap against dense --------------------------------------------------------------
def test_bootstrap_identical_vectors_give_zero():
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0], float)
    assert pretrained.accuracy_vs_dense(a, a, resamples=500, seed=0) == (0.0, 0.0, 0.0)


def test_bootstrap_all_differences_one_give_one():
    assert pretrained.accuracy_vs_dense(np.ones(12), np.zeros(12), resamples=500, seed=0) == (1.0, 1.0, 1.0)


def test_bootstrap_matches_the_normal_interval_on_many_prompts():
    """400 paired prompts: the percentile interval is the mean difference +- 1.96 standard errors within a tenth of
    the half-width, and the same seed gives the same interval."""
    rng = np.random.default_rng(7)
    dense = (rng.random(400) < 0.8).astype(float)
    method = np.where(rng.random(400) < 0.3, 1 - dense, dense)  # flips 30% of the answers
    diff, lo, hi = pretrained.accuracy_vs_dense(method, dense, resamples=2000, seed=1)
    d = method - dense
    half = 1.96 * d.std(ddof=1) / np.sqrt(d.size)
    assert diff == pytest.approx(d.mean())
    assert lo == pytest.approx(d.mean() - half, abs=0.1 * half) and hi == pytest.approx(d.mean() + half, abs=0.1 * half)
    assert (lo, hi) == pretrained.accuracy_vs_dense(method, dense, resamples=2000, seed=1)[1:]


def test_bootstrap_covers_the_true_difference_95_percent_of_the_time():
    """200 simulated sets of 100 paired prompts with true difference -0.1: the interval covers it in 88-99% of
    them (95% nominal; the binomial spread of 200 trials is 1.5 points)."""
    rng = np.random.default_rng(11)
    covered = 0
    for i in range(200):
        d = rng.choice([-1.0, 0.0, 1.0], size=100, p=[0.2, 0.7, 0.1])
        _, lo, hi = pretrained.accuracy_vs_dense(d, np.zeros(100), resamples=1000, seed=i)
        covered += lo <= -0.1 <= hi
    assert 0.88 <= covered / 200 <= 0.99


def test_bootstrap_rejects_unpaired_vectors():
    with pytest.raises(ValueError, match="equal-length"):
        pretrained.accuracy_vs_dense([], [], resamples=200, seed=0)
