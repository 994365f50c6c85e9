#!/usr/bin/env python3
"""Train the bundled demo model (models/demo) on seeded synthetic agent transcripts; evaluate it.

Runs on the device machine (torch, transformers, tokenizers, jinja2; one GPU), never in CI:
    python3 tools/demo/train.py prep WORK [--conversations 200000] [--procs 16] [--variant 1]
                                          [--tokenizer bundled|train]
    python3 tools/demo/train.py train WORK OUTDIR [--preset base] [--train-seconds 420]
prep generates the conversations (gen_data.corpus_parallel: seeded chunks, one process each),
renders them with the chat template, encodes them with the bundled tokenizer
(models/demo/tokenizer.json, kept as is) or, with --tokenizer train, with a byte-level BPE
(vocab 2048, the bundled one's construction) trained on the first TOK_CONVERSATIONS of the
training set itself (WORK/tokenizer.json: words the training set never holds, such as the
evaluation's entities, are split into pieces it does hold), and packs them into 1024-token rows
with loss only on assistant turns (WORK/data.pt). train trains a Llama of the preset's shape with
AdamW under bf16 autocast for a wall-clock budget (the cosine schedule is sized from the measured
step time; the checkpoint is saved however the loop ends), then writes, relative to OUTDIR
(unpack at the repository root):
  models/demo/                 config.json, model.safetensors (bf16), generation_config.json,
                               tokenizer.json, tokenizer_config.json
  tests/fixtures/demo/         heldout.jsonl (prompts over the bundled tools + transformers
                               reference completions), tools.json, chat_goldens.json
  tools/demo/results.json      loss curve, held-out figures, and the frozen evaluation
                               (tools/demo/evalset.py) as transformers scores it on the GPU
Several trainings may share one GPU (one process each, different presets).
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
import tokenizers
import transformers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_data as G  # noqa: E402
import evalset as EV  # noqa: E402

SEED = 7
SEQ = 1024
TOK_CONVERSATIONS = 40000
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MODEL_DIR = os.path.join(HERE, "..", "..", "models", "demo")
PRESETS = {  # hidden, intermediate, layers, heads, kv heads (head_dim 64 throughout)
    "small": (256, 768, 6, 4, 2),
    "base": (384, 1024, 6, 6, 2),
}


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


_ASSIST = re.compile(r"<\|assistant\|>\n(.*?<\|end\|>)", re.S)


def encode_with_mask(text, enc):
    """Token ids and a 0/1 mask that is 1 on tokens starting inside an assistant turn."""
    spans = [(m.start(1), m.end(1)) for m in _ASSIST.finditer(text)]
    starts = np.fromiter((o[0] for o in enc.offsets), dtype=np.int64, count=len(enc.offsets))
    mask = np.zeros(len(starts), dtype=np.uint8)
    for s, e in spans:
        mask[(starts >= s) & (starts < e)] = 1
    return enc.ids, mask


def tokenizer_path(work):
    """The tokenizer prep used: WORK/tokenizer.json when it trained one, else the bundled one."""
    p = os.path.join(work, "tokenizer.json")
    return p if os.path.exists(p) else os.path.join(MODEL_DIR, "tokenizer.json")


def build_tokenizer(texts):
    """Byte-level BPE as the bundled tokenizer was made (commit 9df4639): the special tokens first
    (ids 0..6, as tokenizer_config.json's added_tokens_decoder names them), Qwen2 split regex."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors, \
        trainers
    tk = Tokenizer(models.BPE())
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in G.SPECIAL_TOKENS])
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=G.SPECIAL_TOKENS, show_progress=False)
    tk.train_from_iterator(texts, tr)
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tk = Tokenizer.from_str(tk.to_str())
    for i, sp in enumerate(G.SPECIAL_TOKENS):
        if tk.token_to_id(sp) != i:
            raise RuntimeError("special token %s got id %s" % (sp, tk.token_to_id(sp)))
    return tk


def _texts_chunk(job):
    seed, n, variant = job
    G.set_variant(variant)
    tpl = G.make_env()
    return [G.render(tpl, c["messages"], c["tools"], False) for c in G.corpus(n, seed)]


def _prep_chunk(job):
    seed, n, variant, tok_path = job
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    G.set_variant(variant)
    tk = Tokenizer.from_file(tok_path)
    tpl = G.make_env()
    convs = G.corpus(n, seed)
    texts = [G.render(tpl, c["messages"], c["tools"], False) for c in convs]
    ids, masks = [], []
    for t, enc in zip(texts, tk.encode_batch(texts, add_special_tokens=False)):
        i, m = encode_with_mask(t, enc)
        ids.append(np.asarray(i, dtype=np.int16))
        masks.append(m)
    return np.concatenate(ids), np.concatenate(masks), sum(map(len, texts))


def prep(args):
    import multiprocessing as mp
    os.makedirs(args.work, exist_ok=True)
    tok = os.path.join(args.work, "tokenizer.json")
    if os.path.exists(tok):
        os.unlink(tok)
    jobs = [j + (args.variant,) for j in G.corpus_jobs(args.conversations, SEED)]
    with mp.get_context("fork").Pool(args.procs) as pool:
        if args.tokenizer == "train":
            first = [j for j in jobs if j[0] - SEED * 100003 < TOK_CONVERSATIONS // G.CHUNK]
            texts = [t for part in pool.map(_texts_chunk, first, chunksize=1) for t in part]
            tk = build_tokenizer(texts)
            tk.save(tok + ".tmp")
            os.replace(tok + ".tmp", tok)
            log("tokenizer trained on %d conversations: vocab %d" % (len(texts),
                                                                      tk.get_vocab_size()))
        parts = pool.map(_prep_chunk, [j + (tokenizer_path(args.work),) for j in jobs],
                         chunksize=1)
    ids = np.concatenate([p[0] for p in parts])
    mask = np.concatenate([p[1] for p in parts])
    n_rows = len(ids) // SEQ
    data = torch.from_numpy(ids[:n_rows * SEQ].astype(np.int16)).view(n_rows, SEQ)
    m = torch.from_numpy(mask[:n_rows * SEQ].astype(np.bool_)).view(n_rows, SEQ)
    torch.save({"data": data, "mask": m, "conversations": args.conversations,
                "variant": args.variant, "tokenizer": args.tokenizer,
                "chars": sum(p[2] for p in parts), "tokens": len(ids)},
               os.path.join(args.work, "data.pt"))
    log("prep: %d conversations, %.1f M chars, %.1f M tokens, %d rows, supervised %.3f" % (
        args.conversations, sum(p[2] for p in parts) / 1e6, len(ids) / 1e6, n_rows,
        float(m.float().mean())))


def train(args):
    out = args.out
    mdir = os.path.join(out, "models", "demo")
    fdir = os.path.join(out, "tests", "fixtures", "demo")
    rdir = os.path.join(out, "tools", "demo")
    for d in (mdir, fdir, rdir):
        os.makedirs(d, exist_ok=True)
    random.seed(SEED)
    torch.manual_seed(SEED)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tpl = G.make_env()
    blob = torch.load(os.path.join(args.work, "data.pt"))
    data, mask = blob["data"], blob["mask"]
    n_rows = data.shape[0]
    tk = Tokenizer.from_file(tokenizer_path(args.work))
    ids = {s: tk.token_to_id(s) for s in G.SPECIAL_TOKENS}
    log("data: %d rows of %d, tokenizer vocab %d" % (n_rows, SEQ, tk.get_vocab_size()))

    # ---- model ----
    hid, inter, layers, heads, kvh = PRESETS[args.preset]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": hid, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": 64,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "rope_scaling": None, "tie_word_embeddings": True, "attention_bias": False,
           "mlp_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
           "pretraining_tp": 1, "use_cache": True, "vocab_size": tk.get_vocab_size(),
           "bos_token_id": ids["<|bos|>"], "eos_token_id": ids["<|end|>"],
           "pad_token_id": ids["<|pad|>"], "torch_dtype": "bfloat16",
           "transformers_version": "4.45.0"}
    from transformers import AutoModelForCausalLM, LlamaConfig
    hf_cfg = LlamaConfig(**{k: v for k, v in cfg.items() if k not in (
        "architectures", "torch_dtype", "transformers_version")})
    model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa").float().to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    log("preset", args.preset, "params", nparams)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    peak = args.lr
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=peak,
                            betas=(0.9, 0.95), fused=(dev == "cuda"))
    torch.backends.cuda.matmul.allow_tf32 = True
    B = args.batch
    g = torch.Generator().manual_seed(SEED)
    data, mask = data.to(dev), mask.to(dev)

    def step_batch():
        idx = torch.randint(0, n_rows, (B,), generator=g).to(dev)
        x, m = data[idx].long(), mask[idx]
        labels = torch.where(m[:, 1:], x[:, 1:], torch.full_like(x[:, 1:], -100))
        with torch.autocast(dev, dtype=torch.bfloat16):
            logits = model(x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1), ignore_index=-100)

    # Measure speed, then fix the schedule length to the wall-clock budget; stop at the
    # deadline whatever the estimate said.
    model.train()
    t_start = time.time()
    deadline = t_start + args.train_seconds
    warm, curve = 200, []
    total = args.steps or None  # --steps: the schedule of a recorded run, whatever the speed
    if args.steps:
        deadline = float("inf")
    step = 0
    while True:
        if step == 30:
            if dev == "cuda":
                torch.cuda.synchronize()
            t30 = time.time()
        if total is None and step == 80:
            if dev == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - t30) / 50
            total = max(100, int((deadline - time.time()) / per * 0.97) + 80)
            log("%.1f ms/step -> %d steps" % (per * 1e3, total))
        T = total or 100000
        lr = peak * min(1.0, (step + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(
            math.pi * min(1.0, step / T))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        loss = step_batch()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            curve.append((step, round(loss.item(), 4)))
            if step % 500 == 0:
                log("step", step, "loss %.4f lr %.2e" % (loss.item(), lr))
        step += 1
        if (total is not None and step >= total) or time.time() > deadline or \
                (args.max_steps and step >= args.max_steps):
            break
    curve.append((step, round(loss.item(), 4)))
    train_s = time.time() - t_start
    log("trained %d steps in %.1fs, final loss %.4f" % (step, train_s, curve[-1][1]))

    # ---- save (bf16, HF layout, our own config.json; tokenizer files as bundled) ----
    model.eval()
    tmp = tempfile.mkdtemp()
    model.to(torch.bfloat16).cpu().save_pretrained(tmp)
    shutil.copy(os.path.join(tmp, "model.safetensors"), os.path.join(mdir, "model.safetensors"))
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(mdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": ids["<|bos|>"], "eos_token_id": ids["<|end|>"],
                   "pad_token_id": ids["<|pad|>"], "do_sample": False, "max_new_tokens": 128,
                   "transformers_version": "4.45.0"}, f, indent=2)
    shutil.copy(tokenizer_path(args.work), os.path.join(mdir, "tokenizer.json"))
    # the chat template and special-token ids are the same for a trained tokenizer
    shutil.copy(os.path.join(MODEL_DIR, "tokenizer_config.json"),
                os.path.join(mdir, "tokenizer_config.json"))
    with open(os.path.join(fdir, "tools.json"), "w") as f:
        json.dump(G.TOOLS, f, indent=2, ensure_ascii=False)
    del model

    # ---- chat template goldens through transformers ----
    try:
        chat_goldens(tpl, tk, mdir, fdir)
    except Exception as ex:  # noqa: BLE001 - the evaluation must still run
        import traceback
        log("chat goldens FAILED", repr(ex), traceback.format_exc())

    # ---- held-out and frozen evaluations ----
    try:
        evaluate(args, tpl, tk, ids, mdir, fdir, rdir, dev, nparams, blob, B, step, train_s, curve)
    except Exception as ex:  # noqa: BLE001 - keep the checkpoint and say why
        import traceback
        log("evaluation FAILED", repr(ex), traceback.format_exc())


def chat_goldens(tpl, tk, mdir, fdir):
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(mdir)
    grng = random.Random(99)
    gold = []
    fixed = [
        ({"messages": [{"role": "user", "content": "Hello!"}], "tools": []}, True),
        ({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "What's the weather in Paris?"}],
          "tools": [G.TOOL_BY_NAME["get_weather"], G.TOOL_BY_NAME["get_time"]]}, True),
        ({"messages": [{"role": "user", "content": "What's the weather in Paris?"},
                       G.call_message("get_weather", {"city": "Paris"}),
                       {"role": "tool", "content": "{\"temperature_c\": 18}"}],
          "tools": [G.TOOL_BY_NAME["get_weather"]]}, True),
        ({"messages": [{"role": "user", "content": "Convert 100 USD to EUR"},
                       G.call_message("convert_currency", {"amount": 100, "from_currency": "USD",
                                                           "to_currency": "EUR"})],
          "tools": [G.TOOL_BY_NAME["convert_currency"]]}, False),
        ({"messages": [{"role": "system", "content": "Only system."}], "tools": []}, False),
    ]
    cases = fixed + [(G.conversation(grng), False) for _ in range(5)]
    mismatch = 0
    for c, gen in cases:
        mine = G.render(tpl, c["messages"], c["tools"], gen)
        kw = {"tools": c["tools"]} if c["tools"] else {}
        theirs = at.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=gen,
                                        **kw)
        mismatch += mine != theirs
        gold.append({"messages": c["messages"], "tools": c["tools"],
                     "add_generation_prompt": gen, "text": theirs,
                     "ids": tk.encode(theirs, add_special_tokens=False).ids})
    with open(os.path.join(fdir, "chat_goldens.json"), "w") as f:
        json.dump({"versions": {"transformers": transformers.__version__,
                                "jinja_renderer_mismatches": mismatch}, "cases": gold}, f,
                  ensure_ascii=True)
    log("chat goldens: %d cases, gen_data renderer mismatches vs transformers: %d" % (
        len(gold), mismatch))


def greedy(model, tk, ids, prompts, dev, max_new=96):
    end_id, pad_id = ids["<|end|>"], ids["<|pad|>"]
    pids = [tk.encode(p, add_special_tokens=False).ids for p in prompts]
    outs = []
    for s in range(0, len(pids), 64):
        chunk = pids[s:s + 64]
        L = max(map(len, chunk))
        x = torch.tensor([[pad_id] * (L - len(p)) + p for p in chunk], device=dev)
        am = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in chunk], device=dev)
        with torch.no_grad():
            o = model.generate(x, attention_mask=am, do_sample=False, max_new_tokens=max_new,
                               eos_token_id=end_id, pad_token_id=pad_id)
        for row in o[:, L:].tolist():
            if end_id in row:
                row = row[:row.index(end_id) + 1]
            else:
                row = [t for t in row if t != pad_id]
            outs.append(row)
    texts = [tk.decode([t for t in o if t != end_id], skip_special_tokens=False) for o in outs]
    return outs, texts


def evaluate(args, tpl, tk, ids, mdir, fdir, rdir, dev, nparams, blob, B, step, train_s, curve):
    from transformers import AutoModelForCausalLM
    erng = random.Random(12345)
    plan = [("tool", 200), ("plain", 60), ("unavailable", 40), ("after_result", 50)]
    if args.smoke:
        plan = [(k, 4) for k, _ in plan]
    cases = []
    for kind, n in plan:
        cases += [G.eval_case(erng, kind) for _ in range(n)]
    model = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32,
                                                 attn_implementation="eager").to(dev).eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    end_id = ids["<|end|>"]
    prompts = [G.render(tpl, c["messages"], c["tools"], True) for c in cases]
    outs, texts = greedy(model, tk, ids, prompts, dev)
    stats = {k: {"n": 0} for k, _ in plan}
    rows = []
    for c, p, o, text in zip(cases, prompts, outs, texts):
        cls, calls = G.parse_output(text)
        offered = {t["function"]["name"]: t for t in c["tools"]}
        st = stats[c["kind"]]
        st["n"] += 1
        st[cls] = st.get(cls, 0) + 1
        if cls == "call" and len(calls) == 1:
            name, a = calls[0]
            valid = name in offered and G.schema_valid(offered[name], a)
            st["valid_call"] = st.get("valid_call", 0) + valid
            if c["expected"]:
                ok = valid and name == c["expected"]["name"]
                st["correct_tool"] = st.get("correct_tool", 0) + ok
                exact = ok and a == {k: str(v) for k, v in c["expected"]["arguments"].items()}
                st["exact_args"] = st.get("exact_args", 0) + exact
        st["ended"] = st.get("ended", 0) + (end_id in o)
        rows.append({"kind": c["kind"], "tools": [t["function"]["name"] for t in c["tools"]],
                     "messages": c["messages"], "prompt": p, "expected": c["expected"],
                     "reference": {"ids": o, "text": text, "class": cls}})
    allp = [stats["plain"], stats["unavailable"]]
    summary = {
        "tool_prompts_wellformed_correct_tool_rate": stats["tool"].get("correct_tool", 0) / max(
            1, stats["tool"]["n"]),
        "tool_prompts_exact_args_rate": stats["tool"].get("exact_args", 0) / max(
            1, stats["tool"]["n"]),
        "plain_prompts_tool_call_rate": sum(s.get("call", 0) + s.get("leak", 0) for s in allp) /
        max(1, sum(s["n"] for s in allp)),
        "after_result_text_rate": stats["after_result"].get("text", 0) / max(
            1, stats["after_result"]["n"]),
        "dsml_leak_rate": sum(s.get("leak", 0) for s in stats.values()) / max(1, len(rows)),
    }
    with open(os.path.join(fdir, "heldout.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True) + "\n")
    log("heldout", json.dumps(summary), json.dumps(stats))

    # The frozen evaluation (never trained on; tools/demo/evalset.py) as transformers scores it.
    erows = EV.load()[:12 if args.smoke else None]
    _o, etexts = greedy(model, tk, ids, [EV.prompt(tpl, r) for r in erows], dev)
    frozen, misses = EV.by_set(erows, etexts)
    log("frozen eval", json.dumps(frozen["all"]))
    for m in misses[:60]:
        log("miss", json.dumps(m, ensure_ascii=False)[:300])
    res = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "tokenizers": tokenizers.__version__},
           "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
           "seed": SEED, "preset": args.preset, "params": nparams,
           "conversations": blob["conversations"], "variant": blob.get("variant", 1),
           "tokenizer": blob.get("tokenizer", "bundled"),
           "train_tokens": blob["tokens"],
           "supervised_fraction": float(blob["mask"].float().mean()),
           "batch": [B, SEQ], "lr": args.lr, "steps": step, "train_seconds": round(train_s, 1),
           "loss_curve": curve, "final_loss": curve[-1][1],
           "eval": {"summary": summary, "by_kind": stats,
                    "reference": "transformers fp32 on GPU (TF32 off), greedy, left-padded "
                                 "batches of 64, max_new_tokens 96, stop at <|end|>"},
           "frozen_eval_transformers": {"figures": frozen, "misses": misses,
                                        "texts": {r["id"]: t for r, t in zip(erows, etexts)}}}
    with open(os.path.join(rdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prep")
    p.add_argument("work")
    p.add_argument("--conversations", type=int, default=200000)
    p.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--variant", type=int, default=1, choices=(1, 2, 3, 4, 5),
                   help="gen_data variant (see gen_data.VARIANT)")
    p.add_argument("--tokenizer", default="bundled", choices=("bundled", "train"),
                   help="encode with models/demo/tokenizer.json or train one on the data")
    t = sub.add_parser("train")
    t.add_argument("work")
    t.add_argument("out")
    t.add_argument("--preset", default="base", choices=sorted(PRESETS))
    t.add_argument("--train-seconds", type=float, default=420.0)
    t.add_argument("--max-steps", type=int, default=0)
    t.add_argument("--steps", type=int, default=0,
                   help="a fixed schedule of this many steps, no deadline (to reproduce a run: "
                        "its results.json 'steps'); default: as many as --train-seconds allows")
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--smoke", action="store_true", help="a few evaluation prompts only")
    args = ap.parse_args()
    prep(args) if args.cmd == "prep" else train(args)


if __name__ == "__main__":
    T0 = time.time()
    main()
