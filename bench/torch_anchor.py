#!/usr/bin/env python3
"""Anchors for bench/gpu_decode, measured in the same run on the same GPU:

  hf              transformers LlamaForCausalLM, bf16, attn_implementation="sdpa", eager,
                  `generate` greedy (EOS disabled); prefill = one forward over 2048 tokens.
  torch_compiled  a gpt-fast-style decoder of our own on the same weights: static KV cache
                  (bs, kv_heads, 384, head_dim), one decode step = one function compiled with
                  torch.compile(mode="reduce-overhead", fullgraph=True), i.e. CUDA graphs;
                  the prompt is prefilled eagerly (sdpa, causal).
  copy_GBps       device-to-device copy of 2 GiB (bytes read + written).

TinyLlama-1.1B shape, random weights, prompt 128, greedy. Writes
$TDM_BENCH_OUT/gpu_decode_anchor.json. Env: TDM_ANCHOR_HF_NEW (new tokens per hf run, default
64: hf decodes at ~12 tok/s at bs1, so 256 tokens x 5 runs would take minutes), TDM_ANCHOR_NEW
(compiled decoder, default 256), TDM_ANCHOR_RUNS (5).
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

SHAPE = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
             num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
PROMPT = 128
RUNS = int(os.environ.get("TDM_ANCHOR_RUNS", "5"))
HF_NEW = int(os.environ.get("TDM_ANCHOR_HF_NEW", "64"))
NEW = int(os.environ.get("TDM_ANCHOR_NEW", "256"))
BATCHES = (1, 8, 32)


def log(*a):
    print("#", *a, flush=True)


def sync_time(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t, r


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def copy_bw():
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(7)
    for _ in range(3):
        b.copy_(a)
    ts = [sync_time(lambda: b.copy_(a))[0] for _ in range(10)]
    return 2.0 * n / median(ts) / 1e9


def hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**SHAPE)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


def hf_bench(m, out):
    g = torch.Generator(device="cpu").manual_seed(1)
    with torch.no_grad():
        for bs in BATCHES:
            ids = torch.randint(0, 32000, (bs, PROMPT), generator=g).cuda()
            att = torch.ones_like(ids)
            kw = dict(attention_mask=att, do_sample=False, min_new_tokens=HF_NEW,
                      max_new_tokens=HF_NEW, eos_token_id=None, pad_token_id=0)
            m.generate(ids, **dict(kw, min_new_tokens=4, max_new_tokens=4))  # warm-up
            t, o = sync_time(lambda: m.generate(ids, **kw))
            assert o.shape[1] == PROMPT + HF_NEW, o.shape
            # generate's time includes the prompt's prefill (one forward, small at 128 tokens)
            out["decode_bs%d_tok_s" % bs] = bs * HF_NEW / t
            log("hf generate bs%d: %.1f tok/s (%d new tokens, %.2f s)" % (bs, bs * HF_NEW / t, HF_NEW, t))
        ids = torch.randint(0, 32000, (1, 2048), generator=g).cuda()
        m(ids)
        ts = [sync_time(lambda: m(ids))[0] for _ in range(RUNS)]
        out["prefill_2048_tok_s"] = 2048 / median(ts)
        log("hf prefill 2048: %.0f tok/s" % out["prefill_2048_tok_s"])


class Fast(torch.nn.Module):
    """gpt-fast-style Llama over the HF model's weights, static KV cache."""

    def __init__(self, hf, bs, max_seq):
        super().__init__()
        c = hf.config
        self.H, self.KV, self.hd = c.num_attention_heads, c.num_key_value_heads, c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        sd = hf.model
        self.embed = sd.embed_tokens.weight
        self.norm = sd.norm.weight
        self.lm_head = hf.lm_head.weight
        self.layers = []
        for l in sd.layers:
            a, mlp = l.self_attn, l.mlp
            self.layers.append(dict(
                wqkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous(),
                wo=a.o_proj.weight, w13=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).contiguous(),
                w2=mlp.down_proj.weight, n1=l.input_layernorm.weight, n2=l.post_attention_layernorm.weight))
        dev, dt = self.embed.device, self.embed.dtype
        self.k = [torch.zeros(bs, self.KV, max_seq, self.hd, device=dev, dtype=dt) for _ in self.layers]
        self.v = [torch.zeros_like(t) for t in self.k]
        inv = 1.0 / (SHAPE["rope_theta"] ** (torch.arange(0, self.hd, 2, device=dev).float() / self.hd))
        ang = torch.outer(torch.arange(max_seq, device=dev).float(), inv)
        self.cos, self.sin = torch.cos(ang), torch.sin(ang)
        self.max_seq = max_seq

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def rope(self, x, pos):
        # x (b, h, t, hd); rotate_half form
        c = self.cos[pos][None, None].to(x.dtype)
        s = self.sin[pos][None, None].to(x.dtype)
        c = torch.cat([c, c], -1)
        s = torch.cat([s, s], -1)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    def forward(self, ids, pos):
        # ids (b, t), pos (t) absolute positions; causal over the cache
        b, t = ids.shape
        x = F.embedding(ids, self.embed)
        mask = torch.arange(self.max_seq, device=ids.device)[None, :] <= pos[:, None]  # (t, S)
        for i, L in enumerate(self.layers):
            h = self.rms(x, L["n1"])
            qkv = h @ L["wqkv"].t()
            q, k, v = qkv.split([self.H * self.hd, self.KV * self.hd, self.KV * self.hd], -1)
            q = self.rope(q.view(b, t, self.H, self.hd).transpose(1, 2), pos)
            k = self.rope(k.view(b, t, self.KV, self.hd).transpose(1, 2), pos)
            v = v.view(b, t, self.KV, self.hd).transpose(1, 2)
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            o = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=mask[None, None],
                                               enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(b, t, -1) @ L["wo"].t()
            h = self.rms(x, L["n2"])
            g, u = (h @ L["w13"].t()).chunk(2, -1)
            x = x + (F.silu(g) * u) @ L["w2"].t()
        return self.rms(x[:, -1], self.norm) @ self.lm_head.t()


def compiled_bench(hf, out):
    g = torch.Generator(device="cpu").manual_seed(2)
    with torch.no_grad():
        for bs in BATCHES:
            m = Fast(hf, bs, PROMPT + NEW)
            step = torch.compile(m.forward, mode="reduce-overhead", fullgraph=True)
            ids = torch.randint(0, 32000, (bs, PROMPT), generator=g).cuda()
            t0 = time.perf_counter()

            def run():
                logits = m.forward(ids, torch.arange(PROMPT, device="cuda"))
                tok = logits.argmax(-1, keepdim=True)
                for s in range(NEW):
                    logits = step(tok, torch.tensor([PROMPT + s], device="cuda"))
                    tok = logits.argmax(-1, keepdim=True)
                    tok.cpu()  # the host sees every token, as a server does
                return tok

            run()  # compile + graph capture
            log("compiled bs%d: compile + first run %.1f s" % (bs, time.perf_counter() - t0))
            ts = []
            for _ in range(RUNS):
                # time the decode steps only (the prompt's eager prefill excluded), as tandem does
                logits = m.forward(ids, torch.arange(PROMPT, device="cuda"))
                tok = logits.argmax(-1, keepdim=True)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for s in range(NEW):
                    logits = step(tok, torch.tensor([PROMPT + s], device="cuda"))
                    tok = logits.argmax(-1, keepdim=True)
                    tok.cpu()
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t)
            out["decode_bs%d_tok_s" % bs] = bs * NEW / median(ts)
            log("compiled decode bs%d: %.1f tok/s" % (bs, out["decode_bs%d_tok_s" % bs]))
            del m, step
            torch.compiler.reset()


def main():
    outdir = os.environ.get("TDM_BENCH_OUT", ".")
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import transformers
        res["transformers"] = transformers.__version__
    except Exception:
        pass
    res["copy_GBps"] = copy_bw()
    log("copy %.0f GB/s" % res["copy_GBps"])
    hf = hf_model()
    res["hf"] = {}
    res["torch_compiled"] = {}
    res["hf_protocol"] = "generate, %d new tokens, 1 timed run after a warm-up; prefill median of %d" % (HF_NEW, RUNS)
    res["torch_compiled_protocol"] = "%d decode steps, median of %d, prompt prefill excluded" % (NEW, RUNS)

    def save():
        with open(os.path.join(outdir, "gpu_decode_anchor.json"), "w") as f:
            json.dump(res, f, indent=1)

    which = os.environ.get("TDM_ANCHOR_ONLY", "")
    if which in ("", "hf"):
        hf_bench(hf, res["hf"])
        save()
    if which in ("", "compiled"):
        compiled_bench(hf, res["torch_compiled"])
    save()
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
