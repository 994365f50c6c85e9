#!/usr/bin/env python3
"""Train the bundled demo model (models/demo) on seeded synthetic agent transcripts; evaluate it.

Runs on the device machine (torch, transformers, tokenizers, jinja2; one GPU), never in CI:
    python3 tools/demo/train.py OUTDIR [--train-seconds 140]
Writes, relative to OUTDIR (unpack at the repository root):
  models/demo/                 HF checkpoint: config.json, model.safetensors (bf16),
                               generation_config.json, tokenizer.json, tokenizer_config.json
  tests/fixtures/demo/         heldout.jsonl (eval prompts + reference completions), tools.json,
                               chat_goldens.json (transformers apply_chat_template goldens)
  tools/demo/results.json      training loss curve + held-out evaluation metrics
Steps: generate conversations (gen_data.py), train a byte-level BPE tokenizer (Qwen2-style split
regex, vocab 2048), pack rendered conversations into 1024-token rows with loss only on assistant
turns, train a 4-layer Llama (hidden 256, 4 q / 2 kv heads, head_dim 64, tied embeddings) with
AdamW under bf16 autocast for a fixed wall-clock budget, save bf16, reload in fp32 and evaluate
greedy completions on held-out prompts.
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

import torch
import tokenizers
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers import trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data as G  # noqa: E402

SEED = 7
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SEQ = 1024


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


def build_tokenizer(texts):
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
    return Tokenizer.from_str(tk.to_str())


_ASSIST = re.compile(r"<\|assistant\|>\n(.*?<\|end\|>)", re.S)


def encode_with_mask(text, enc):
    spans = [(m.start(1), m.end(1)) for m in _ASSIST.finditer(text)]
    mask, j = [], 0
    for (s, _e) in enc.offsets:
        while j < len(spans) and s >= spans[j][1]:
            j += 1
        mask.append(1 if j < len(spans) and spans[j][0] <= s < spans[j][1] else 0)
    return enc.ids, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train-seconds", type=float, default=140.0)
    ap.add_argument("--conversations", type=int, default=80000)
    args = ap.parse_args()
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

    # ---- data ----
    rng = random.Random(SEED)
    convs = [G.conversation(rng) for _ in range(args.conversations)]
    texts = [G.render(tpl, c["messages"], c["tools"], False) for c in convs]
    log("rendered", len(texts), "conversations, %.1f M chars" % (sum(map(len, texts)) / 1e6))
    tk = build_tokenizer(texts[:8000])
    ids = {s: tk.token_to_id(s) for s in G.SPECIAL_TOKENS}
    log("tokenizer vocab", tk.get_vocab_size(), ids)
    stream, mstream = [], []
    for t, enc in zip(texts, tk.encode_batch(texts, add_special_tokens=False)):
        i, m = encode_with_mask(t, enc)
        stream += i
        mstream += m
    n_rows = len(stream) // SEQ
    data = torch.tensor(stream[:n_rows * SEQ]).view(n_rows, SEQ)
    mask = torch.tensor(mstream[:n_rows * SEQ]).view(n_rows, SEQ)
    log("tokens %.2f M, rows %d, supervised fraction %.3f" % (len(stream) / 1e6, n_rows,
                                                             mask.float().mean().item()))

    # ---- model ----
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
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
    log("params", nparams)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=3e-3,
                            betas=(0.9, 0.95), fused=(dev == "cuda"))
    torch.backends.cuda.matmul.allow_tf32 = True
    B = 32
    g = torch.Generator().manual_seed(SEED)
    data, mask = data.to(dev), mask.to(dev)

    def step_batch():
        idx = torch.randint(0, n_rows, (B,), generator=g).to(dev)
        x, m = data[idx], mask[idx]
        labels = torch.where(m[:, 1:].bool(), x[:, 1:], torch.full_like(x[:, 1:], -100))
        with torch.autocast(dev, dtype=torch.bfloat16):
            logits = model(x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1), ignore_index=-100)

    # Measure speed, then fix the schedule length to the wall-clock budget.
    model.train()
    t_start = time.time()
    warm, curve = 100, []
    total = None
    step = 0
    while True:
        if step == 30:  # time steps 30..60 (after CUDA/autotune warm-up)
            if dev == "cuda":
                torch.cuda.synchronize()
            t30 = time.time()
        if total is None and step == 60:
            if dev == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - t30) / 30
            total = max(200, min(8000, int((args.train_seconds - (t30 - t_start)) / per) + 60))
            log("%.1f ms/step -> %d steps" % (per * 1e3, total))
        T = total or 8000
        lr = 3e-3 * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(
            math.pi * min(1.0, step / T))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        loss = step_batch()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or (total and step == total - 1):
            curve.append((step, round(loss.item(), 4)))
            if step % 250 == 0:
                log("step", step, "loss %.4f lr %.2e" % (loss.item(), lr))
        step += 1
        if total is not None and step >= total:
            break
    train_s = time.time() - t_start
    log("trained %d steps in %.1fs, final loss %.4f" % (step, train_s, curve[-1][1]))

    # ---- save (bf16, HF layout, our own config.json) ----
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
    tk.save(os.path.join(mdir, "tokenizer.json"))
    j = json.loads(tk.to_str())
    tcfg = {"added_tokens_decoder": {str(a["id"]): {k: a[k] for k in (
        "content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in j["added_tokens"]},
        "bos_token": G.BOS, "eos_token": G.EOS, "pad_token": G.PAD,
        "clean_up_tokenization_spaces": False, "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": G.CHAT_TEMPLATE}
    with open(os.path.join(mdir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2, ensure_ascii=False)
    with open(os.path.join(fdir, "tools.json"), "w") as f:
        json.dump(G.TOOLS, f, indent=2, ensure_ascii=False)
    del model

    # ---- chat template goldens through transformers ----
    try:
        chat_goldens(tpl, tk, mdir, fdir)
    except Exception as ex:  # noqa: BLE001 - the evaluation must still run
        import traceback
        log("chat goldens FAILED", repr(ex), traceback.format_exc())

    # ---- held-out evaluation ----
    evaluate(args, tpl, tk, ids, convs, mdir, fdir, rdir, dev, nparams, stream, mask, B, step,
             train_s, curve)


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


def evaluate(args, tpl, tk, ids, convs, mdir, fdir, rdir, dev, nparams, stream, mask, B, step,
             train_s, curve):
    from transformers import AutoModelForCausalLM
    seen = set()
    for c in convs:
        for i, m in enumerate(c["messages"]):
            if m["role"] == "user":
                seen.add((tuple(t["function"]["name"] for t in c["tools"]), m["content"]))
    erng = random.Random(12345)
    plan = [("tool", 200), ("plain", 60), ("unavailable", 40), ("after_result", 50)]
    cases = []
    for kind, n in plan:
        while sum(1 for c in cases if c["kind"] == kind) < n:
            c = G.eval_case(erng, kind)
            last_user = [m["content"] for m in c["messages"] if m["role"] == "user"][-1]
            if (tuple(t["function"]["name"] for t in c["tools"]), last_user) in seen \
                    and kind != "after_result":
                continue
            cases.append(c)
    model = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32,
                                                 attn_implementation="eager").to(dev).eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    end_id, pad_id = ids["<|end|>"], ids["<|pad|>"]
    prompts = [G.render(tpl, c["messages"], c["tools"], True) for c in cases]
    pids = [tk.encode(p, add_special_tokens=False).ids for p in prompts]
    outs = []
    for s in range(0, len(pids), 64):
        chunk = pids[s:s + 64]
        L = max(map(len, chunk))
        x = torch.tensor([[pad_id] * (L - len(p)) + p for p in chunk], device=dev)
        am = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in chunk], device=dev)
        with torch.no_grad():
            o = model.generate(x, attention_mask=am, do_sample=False, max_new_tokens=96,
                               eos_token_id=end_id, pad_token_id=pad_id)
        for row in o[:, L:].tolist():
            if end_id in row:
                row = row[:row.index(end_id) + 1]
            else:
                row = [t for t in row if t != pad_id]
            outs.append(row)
    stats = {k: {"n": 0} for k, _ in plan}
    rows = []
    for c, p, o in zip(cases, prompts, outs):
        text = tk.decode([t for t in o if t != end_id], skip_special_tokens=False)
        cls, calls = G.parse_output(text)
        offered = {t["function"]["name"]: t for t in c["tools"]}
        st = stats[c["kind"]]
        st["n"] += 1
        st[cls] = st.get(cls, 0) + 1
        ok = False
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
    res = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "tokenizers": tokenizers.__version__},
           "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
           "seed": SEED, "params": nparams, "conversations": len(convs),
           "train_tokens": len(stream), "supervised_fraction": float(mask.float().mean()),
           "batch": [B, SEQ], "steps": step, "train_seconds": round(train_s, 1),
           "loss_curve": curve, "final_loss": curve[-1][1],
           "eval": {"summary": summary, "by_kind": stats,
                    "reference": "transformers fp32 on GPU (TF32 off), greedy, left-padded "
                                 "batches of 64, max_new_tokens 96, stop at <|end|>"}}
    with open(os.path.join(rdir, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    log("eval", json.dumps(summary), json.dumps(stats))
    for r in rows[:3] + rows[200:202] + rows[300:302]:
        log(r["kind"], repr(r["reference"]["text"])[:200])


if __name__ == "__main__":
    T0 = time.time()
    main()
