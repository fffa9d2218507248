"""P8 eagle, full scale (papers.eagle.llava): LLaVA-style records and their errors, experts and LM from local
Hugging Face directories (tiny randomly initialised models saved to a tmp dir), the loss against a hand
computation from the LM's own forward pass, greedy-answer accuracy, and the stages end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from papers.eagle import fusion as Fu
from papers.eagle import llava as L
from papers.common.params import to_dict
from papers.eagle.params import Params, parse

transformers = pytest.importorskip("transformers")
WORDS = ["which", "digit", "is", "big", "small", "zero", "one", "two", "three"]


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """Three tiny vision experts (CLIP ViT, ViT, ConvNeXt), a tiny Llama with a word-level tokenizer, three PNGs
    and train / benchmark JSON files."""
    from PIL import Image
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPVisionConfig, CLIPVisionModel, ConvNextConfig, ConvNextModel, LlamaConfig,
                              LlamaForCausalLM, PreTrainedTokenizerFast, ViTConfig, ViTModel)

    root = tmp_path_factory.mktemp("eagle_hf")
    torch.manual_seed(0)
    CLIPVisionModel(CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=16, patch_size=4)).save_pretrained(root / "clip")
    ViTModel(ViTConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                       patch_size=4)).save_pretrained(root / "hires")
    ConvNextModel(ConvNextConfig(hidden_sizes=[8, 12], depths=[1, 1], num_stages=2)).save_pretrained(root / "det")
    vocab = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "<unk>", "USER:", "ASSISTANT:", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(root / "lm")
    LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                                 bos_token_id=1, eos_token_id=2, pad_token_id=0)).save_pretrained(root / "lm")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(images / f"{i}.png")
    conv = [
        [{"from": "human", "value": "<image>\nwhich digit is big"}, {"from": "gpt", "value": "two"}],
        [{"from": "human", "value": "which digit is small <image>"}, {"from": "gpt", "value": "one"},
         {"from": "human", "value": "which digit is big"}, {"from": "gpt", "value": "three zero"}],
        [{"from": "human", "value": "<image>\nwhich digit is small"}, {"from": "gpt", "value": "zero"}],
    ]
    recs = [{"id": f"r{i}", "image": f"{i}.png", "conversations": c, "kind": k}
            for i, (c, k) in enumerate(zip(conv, ["global", "fine", "fine"]))]
    for name in ("train", "bench"):
        (root / f"{name}.json").write_text(json.dumps(recs))
    defaults = to_dict(Params())
    cfg = {"seeds": 1, "arm_seeds": {"fusion": 1, "single": 1, "prealign": 1, "blind": 1, "shuffled": 1},
           "data": defaults["data"],
           "experts": {**defaults["experts"], "names": ["clip", "hires", "det"]},
           # hidden 96: LLaVA-HR's two MR-Adapters (one per high-res expert, a 7 x 7 depthwise convolution each) and
           # its final path hold 4166 parameters at these widths, more than a 64-wide concat projector's whole budget
           "fusion": {"grid": 4, "hidden": 96, "deformable_points": 2},
           "train": {**defaults["train"], "prealign_steps": 1, "align_steps": 1, "sft_steps": 4, "batch": 2,
                     "eval_every": 1},
           "llava": {"train_json": str(root / "train.json"), "val_json": str(root / "bench.json"),
                     "test_json": str(root / "bench.json"), "image_folder": str(images),
                     "experts": {e: str(root / e) for e in ("clip", "hires", "det")}, "lm": str(root / "lm"),
                     "image_sizes": {"clip": None, "hires": None, "det": 32}, "select_layer": -2,
                     "max_text_tokens": 64, "lm_dtype": "float32", "lora": {"rank": 0, "alpha": 16}}}
    return root, cfg


def test_records_are_read_and_checked(hf):
    root, cfg = hf
    recs = L.load_records(root / "bench.json", root / "images", kinds=["global", "fine"])
    assert [r["kind"] for r in recs] == ["global", "fine", "fine"]
    assert recs[1]["turns"] == [["which digit is small", "one"], ["which digit is big", "three zero"]]
    assert recs[0]["image"] == str(root / "images" / "0.png")


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r[1].pop("image"), r"record 1 \(id 'r1'\): no 'image'"),
    (lambda r: r[2].update(image="missing.png"), r"record 2 \(id 'r2'\): image .*missing.png does not exist"),
    (lambda r: r[0]["conversations"].reverse(), r"record 0 .*turn 0 must be"),
    (lambda r: r[0]["conversations"].pop(), r"record 0 .*pairs"),
    (lambda r: r[2].update(kind="ocr"), r"record 2 .*'kind' must be one of"),
])
def test_bad_records_name_file_and_record(hf, tmp_path, mutate, message):
    root, _ = hf
    recs = json.loads((root / "bench.json").read_text())
    mutate(recs)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(recs))
    with pytest.raises((ValueError, FileNotFoundError), match=message) as e:
        L.load_records(bad, root / "images", kinds=["global", "fine"])
    assert str(bad) in str(e.value)


def test_bad_paths_and_json_raise_clearly(hf, tmp_path):
    root, cfg = hf
    with pytest.raises(FileNotFoundError, match="nope.json does not exist"):
        L.load_records(tmp_path / "nope.json", root / "images")
    (tmp_path / "broken.json").write_text('[{"id": 1,\n "image": }]')
    with pytest.raises(ValueError, match=r"broken.json: not valid JSON \(line 2"):
        L.load_records(tmp_path / "broken.json", root / "images")
    with pytest.raises(FileNotFoundError, match="eagle.llava.experts.hires"):
        L.HFExpert("hires", tmp_path)
    with pytest.raises(FileNotFoundError, match="eagle.llava.lm"):
        L.load_lm(tmp_path)
    half = {**cfg["llava"], "lm": None, "experts": {**cfg["llava"]["experts"], "det": None}}
    with pytest.raises(ValueError, match="eagle.llava.lm, eagle.llava.experts.det"):
        parse({**cfg, "llava": half})


def test_experts_return_the_towers_own_maps(hf):
    """Each expert's map is the HF model's own output: CLIP's penultimate hidden state without CLS, reshaped
    row-major; ConvNeXt's last stage."""
    from transformers import CLIPVisionModel, ConvNextModel

    root, _ = hf
    x = torch.randn(2, 3, 16, 16)
    clip = L.HFExpert("clip", root / "clip")
    assert (clip.channels, clip.out_size, clip.in_size) == (16, 4, 16)
    ref = CLIPVisionModel.from_pretrained(root / "clip")(pixel_values=x, output_hidden_states=True).hidden_states[-2]
    got = clip(x)
    torch.testing.assert_close(got[:, :, 1, 2], ref[:, 1 + 1 * 4 + 2])
    det = L.HFExpert("det", root / "det", image_size=32)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(det(x), ConvNextModel.from_pretrained(root / "det")(pixel_values=x).last_hidden_state)
    assert (det.channels, det.out_size) == (12, 8 // 2)
    hires = L.HFExpert("hires", root / "hires")
    assert (hires.channels, hires.out_size) == (8, 8)


def _model(cfg, fusion="concat"):
    p = parse(cfg)
    arm = {"name": "x", "experts": ["clip", "hires", "det"], "fusion": fusion, "inputs": ["image"] * 3, "prealign": None}
    return L.build(arm, p, "cpu")


def test_loss_is_the_answer_tokens_cross_entropy(hf):
    """The loss equals a hand computation: the LM run on [BOS, visual tokens, text] embeddings by hand, then the
    mean cross-entropy over the answer tokens and their EOS only (found from the words, not from the labels)."""
    root, cfg = hf
    model, tok = _model(cfg)
    recs = L.load_records(root / "train.json", root / "images")
    images = [r["image"] for r in recs]
    batch = L.collate(recs, tok, 64)
    out, labels = model(images, batch)
    v = model.visual_tokens(images)
    nll, count = 0.0, 0
    for b, r in enumerate(recs):
        words = ["<s>"] + sum(([*f"USER: {q} ASSISTANT:".split(), *a.split(), "</s>"] for q, a in r["turns"]), [])
        ids = torch.tensor(tok.convert_tokens_to_ids(words))
        answer = torch.zeros(len(words), dtype=torch.bool)
        pos = 1
        for q, a in r["turns"]:
            pos += len(f"USER: {q} ASSISTANT:".split())
            answer[pos:pos + len(a.split()) + 1] = True
            pos += len(a.split()) + 1
        emb = model.lm.get_input_embeddings()(ids)
        x = torch.cat([emb[:1], v[b], emb[1:]])[None]
        logits = model.lm(inputs_embeds=x).logits[0]  # (1 + N + T - 1, V)
        N = v.shape[1]
        text_logits = logits[N:]  # text token t (t >= 1) sits at N + t: predicted at N + t - 1
        for t in range(1, len(words)):
            if answer[t]:
                nll += F.cross_entropy(text_logits[t - 1][None], ids[t][None]).item()
                count += 1
    assert count == 2 + (2 + 3) + 2  # "two </s>", "one </s>" + "three zero </s>", "zero </s>"
    assert out.loss.item() == pytest.approx(nll / count, rel=1e-5)
    assert int((labels != L.IGNORE).sum()) == count


def test_padding_does_not_change_a_records_logits(hf):
    root, cfg = hf
    model, tok = _model(cfg, "sequence_append")
    model.eval()
    recs = L.load_records(root / "train.json", root / "images")
    alone, _ = model([recs[0]["image"]], L.collate(recs[:1], tok, 64))
    padded, _ = model([recs[0]["image"], recs[1]["image"]], L.collate(recs[:2], tok, 64))
    T = alone.logits.shape[1]
    torch.testing.assert_close(padded.logits[0, :T], alone.logits[0], rtol=1e-4, atol=1e-5)


def test_greedy_correctness_by_hand():
    logits = torch.zeros(2, 4, 5)
    logits[0, 1, 3] = logits[0, 2, 4] = 1  # row 0 predicts 3 then 4
    logits[1, 1, 3] = logits[1, 2, 0] = 1  # row 1 predicts 3 then 0
    labels = torch.tensor([[L.IGNORE, L.IGNORE, 3, 4], [L.IGNORE, L.IGNORE, 3, 4]])
    assert L.record_correct(logits, labels).tolist() == [True, False]


@pytest.mark.parametrize("fusion", sorted(Fu.FUSIONS))
def test_stages_train_the_parts_they_unfreeze(hf, fusion):
    """Stage 1 moves the fusion only; SFT moves the towers and the LM too (forward / backward through HF models)."""
    root, cfg = hf
    model, tok = _model(cfg, fusion)
    recs = L.load_records(root / "train.json", root / "images")
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def moved(prefix):
        return any(not torch.equal(before[k], v) for k, v in model.state_dict().items() if k.startswith(prefix))

    L.set_trainable(model, towers=False, fusion=True, lm=False)
    loss = L.fit(model, recs, tok, steps=1, batch=2, lr=1e-2, max_tokens=64, rng=np.random.default_rng(0))
    assert np.isfinite(loss)
    assert moved("fusion") and not moved("towers") and not moved("lm")
    L.set_trainable(model, towers=True, fusion=True, lm=True)
    L.fit(model, recs, tok, steps=1, batch=2, lr=1e-2, max_tokens=64, rng=np.random.default_rng(0))
    assert moved("towers.0") and moved("towers.1") and moved("towers.2") and moved("lm")


def test_stages_end_to_end(hf, tmp_path):
    """prepare -> pretrain (loads and describes the HF models) -> train (one job per arm, the round-robin's slots
    after the single experts) -> evaluate on 3 records; each job's rows are, bit for bit, those of the same arm
    trained among the seed's others in one process (papers.eagle.train.study, the former per-seed job)."""
    import pandas as pd

    from papers.common.seeding import seed_everything
    from papers.eagle import arms as A
    from papers.eagle import data as D
    from papers.eagle import stages
    from papers.eagle import train as T
    from papers.eagle.report import evaluate, round_robin_path

    _, cfg = hf
    D.prepare(cfg=cfg, data=tmp_path / "data.npz")
    assert len(L.read_records(tmp_path / "data.npz", "test")) == 3
    stages.pretrain(cfg=cfg, data=tmp_path / "data.npz", experts=tmp_path / "e.pt")
    found = torch.load(tmp_path / "e.pt")["llava"]
    assert found["lm_width"] == 16 and found["experts"]["hires"]["side"] == 8
    names, groups, files = cfg["experts"]["names"], A.seed_groups(cfg["arm_seeds"], 0), []
    for job in A.seed_jobs(names, groups):
        files.append(tmp_path / "train" / f"{job}.parquet")
        stages.train(cfg=cfg, seed="0", arm=job, data=tmp_path / "data.npz", experts=tmp_path / "e.pt",
                     selection=[tmp_path / "train" / f"{j}.parquet" for j in A.selection(names, job)],
                     accuracies=files[-1])
    evaluate(cfg=cfg, accuracies=files, table=tmp_path / "table.parquet")
    df = round_robin_path(pd.read_parquet(tmp_path / "table.parquet"), parse(cfg))
    assert {"fusion:concat", "prealign:concat", "control:blind_hires_experts", "single:det"} <= set(df.arm)
    assert set(df.kind) == {"global", "fine", "all"} and set(df.split) == {"val", "test"}
    assert (df.static_memory_gb > 0).all()
    assert (df.rr_step > 0).groupby(df.arm).any().sum() == 3  # the round-robin's three steps
    assert df.arm.str.startswith("rr:").sum() and len(files) == 13

    seed_everything(0)
    p = parse(cfg)
    splits = {s: L.read_records(tmp_path / "data.npz", s) for s in ("train", "val", "test")}
    whole = pd.DataFrame(T.study(lambda a, rng: L.run_arm(a, splits, p, rng), 0, names, groups)).assign(seed=0)
    key = ["arm", "split", "kind"]
    split, whole = (t[sorted(t.columns)].sort_values(key).reset_index(drop=True) for t in (df, whole))
    np.testing.assert_array_equal(split.final_loss.to_numpy(float), whole.final_loss.to_numpy(float))
    pd.testing.assert_frame_equal(split, whole, check_dtype=False, check_exact=True)
    from papers.eagle.report import report

    out = {k: tmp_path / v for k, v in {"table_md": "t.md", "table_csv": "t.csv", "claims": "c.json",
                                        "params_json": "p.json", "report_md": "r.md", "accuracy_figure": "a.png",
                                        "verdicts": "v.png"}.items()}
    report(cfg=cfg, scale="full", table=tmp_path / "table.parquet", benchmarks=[], **out)
    text = out["report_md"].read_text()
    assert cfg["llava"]["test_json"] in text and "chance" not in out["table_md"].read_text()


def test_lora_starts_as_the_pretrained_lm_and_trains_only_its_adapters(hf):
    """LoRA (Hu et al. 2022): B = 0 at the start, so the LM's logits are unchanged; with the LM unfrozen only the
    adapters train; a bf16 LM keeps float32 adapters."""
    root, cfg = hf
    lm, tok = L.load_lm(cfg["llava"]["lm"])
    ids = torch.tensor([[1, 6, 7, 8]])
    before = lm(input_ids=ids).logits
    n = L.add_lora(lm, rank=2, alpha=4)
    assert n == 4  # q, k, v, o of the tiny Llama's one layer
    torch.testing.assert_close(lm(input_ids=ids).logits, before)
    model, tok = _model({**cfg, "llava": {**cfg["llava"], "lora": {"rank": 2, "alpha": 4}}}, "concat")
    L.set_trainable(model, towers=True, fusion=True, lm=True)
    trainable = {k for k, q in model.lm.named_parameters() if q.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    full = sum(q.numel() * 16 for q in model.parameters() if q.requires_grad)
    frozen = sum(q.numel() * q.element_size() for q in model.parameters() if not q.requires_grad)
    assert L.static_memory_gb(model) == pytest.approx((full + frozen) / 1e9)
    half, _ = L.load_lm(cfg["llava"]["lm"], "bfloat16")
    L.add_lora(half, rank=2, alpha=4)
    layer = next(m for m in half.modules() if isinstance(m, L.LoRALinear))
    assert layer.base.weight.dtype == torch.bfloat16 and layer.lora_a.dtype == torch.float32
    assert half(input_ids=ids).logits.dtype == torch.bfloat16
