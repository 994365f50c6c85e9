#!/usr/bin/env python3
"""gpu_bf16_emu.py MODEL_DIR IDS [STEPS] -- a bf16 Llama checkpoint's greedy decode of one prompt
(IDS: comma-separated token ids) in pure Python, twice: in fp32 (what the CPU graph and the
goldens compute) and with the activations rounded to bf16 where the CUDA engine's multi-row
calls round them (the inputs of every projection: both norms' outputs, the attention output,
silu(gate)*up, the final norm), the KV cache bf16 in both. Prints each step's top-1, top-2 and
margin per mode: a step whose margin the rounding alone moves near zero is one where the GPU may
flip without a fault (docs/cuda.md "Mixed steps"). Tiny fixtures only (no numpy; seconds for
tests/fixtures/models/tiny-llama-gqa)."""
import json
import math
import os
import struct
import sys


def bf16_to_f(u):
    return struct.unpack("<f", struct.pack("<I", u << 16))[0]


def round_bf16(x):
    """fp32 -> bf16 -> fp32, round to nearest even"""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def load(model_dir):
    """config and tensors (rows of floats) of a single-file bf16 safetensors checkpoint"""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    raw = open(os.path.join(model_dir, "model.safetensors"), "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr, base, w = json.loads(raw[8:8 + hl]), 8 + hl, {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "BF16":
            sys.exit("%s: %s is %s; only BF16 checkpoints" % (model_dir, name, t["dtype"]))
        a, b = t["data_offsets"]
        vals = [bf16_to_f(u) for u in struct.unpack("<%dH" % ((b - a) // 2), raw[base + a:base + b])]
        shape = t["shape"]
        w[name] = [vals[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])] \
            if len(shape) == 2 else vals
    return cfg, w


def decode(cfg, w, prompt, steps, bf16):
    H, KV, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    hd = cfg.get("head_dim") or d // H
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    act = (lambda v: [round_bf16(x) for x in v]) if bf16 else (lambda v: v)

    def mv(m, x):
        return [sum(a * b for a, b in zip(r, x)) for r in m]

    def rms(x, g):
        r = 1 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
        return [v * r * gi for v, gi in zip(x, g)]

    def rope(v, pos):
        out, half = list(v), hd // 2
        for i in range(half):
            f = pos / theta ** (2 * i / hd)
            c, s = math.cos(f), math.sin(f)
            out[i], out[i + half] = v[i] * c - v[i + half] * s, v[i + half] * c + v[i] * s
        return out

    cache = [[] for _ in range(cfg["num_hidden_layers"])]  # per layer: (k heads, v heads), bf16
    outs, pos, feed = [], 0, list(prompt)
    while len(outs) < steps:
        for t in feed:
            x = list(w["model.embed_tokens.weight"][t])
            for layer, kvs in enumerate(cache):
                p = "model.layers.%d." % layer
                h = act(rms(x, w[p + "input_layernorm.weight"]))
                q, k, v = (mv(w[p + "self_attn.%s_proj.weight" % n], h) for n in "qkv")
                kvs.append(([[round_bf16(z) for z in rope(k[j * hd:(j + 1) * hd], pos)]
                             for j in range(KV)],
                            [[round_bf16(z) for z in v[j * hd:(j + 1) * hd]] for j in range(KV)]))
                att = []
                for head in range(H):
                    qh, g = rope(q[head * hd:(head + 1) * hd], pos), head // (H // KV)
                    sc = [sum(a * b for a, b in zip(qh, kc[g])) / math.sqrt(hd) for kc, _ in kvs]
                    mx = max(sc)
                    e = [math.exp(s - mx) for s in sc]
                    z = sum(e)
                    att += [sum(e[i] * kvs[i][1][g][j] for i in range(len(e))) / z
                            for j in range(hd)]
                o = mv(w[p + "self_attn.o_proj.weight"], act(att))
                x = [a + b for a, b in zip(x, o)]
                h = act(rms(x, w[p + "post_attention_layernorm.weight"]))
                gate, up = mv(w[p + "mlp.gate_proj.weight"], h), mv(w[p + "mlp.up_proj.weight"], h)
                dn = mv(w[p + "mlp.down_proj.weight"],
                        act([a / (1 + math.exp(-a)) * b for a, b in zip(gate, up)]))
                x = [a + b for a, b in zip(x, dn)]
            pos += 1
        lg = mv(w["lm_head.weight"], act(rms(x, w["model.norm.weight"])))
        top = sorted(range(len(lg)), key=lambda i: -lg[i])
        outs.append((top[0], top[1], lg[top[0]] - lg[top[1]]))
        feed = [top[0]]
    return outs


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: gpu_bf16_emu.py MODEL_DIR IDS [STEPS]")
    cfg, w = load(sys.argv[1])
    prompt = [int(t) for t in sys.argv[2].split(",")]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    for name, bf16 in (("fp32", False), ("bf16", True)):
        for i, (a, b, m) in enumerate(decode(cfg, w, prompt, steps, bf16)):
            print("%s step %d: top1 %d top2 %d margin %.5f" % (name, i, a, b, m))


if __name__ == "__main__":
    main()
