#!/usr/bin/env python3
"""Write a random-weight Llama-shaped checkpoint (config.json + model.safetensors, bf16) for
bench/cpu_engine: the CPU engine's speed depends on shapes and bytes, not on trained values.

Standard library only (no numpy here). A few MiB of random bf16 values in [-0.05, 0.05] are made
once and tiled with a rotating offset into every tensor, so generating ~300 MiB takes seconds.
Norm weights are 1.0. Nothing here is committed: write it under /tmp.

Usage: gen_random_model.py OUTDIR [--preset small|large]
  small: 4 layers, hidden 256, vocab 4096 (~5 M params)
  large: 12 layers, hidden 1024, GQA 16/4, intermediate 2816, vocab 32000, tied (~170 M params)
  tinyllama-demo: TinyLlama-1.1B's shape with models/demo's vocabulary (its config.json's
    vocab_size, so that its tokenizer's ids fit; ~1.0 G params)
"""
import json
import os
import random
import struct
import sys

PRESETS = {
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=4096,
                  tie_word_embeddings=False),
    "large": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                  num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                  tie_word_embeddings=True),
    # TinyLlama-1.1B's shape with models/demo's vocabulary (its tokenizer and ids), for serving
    # through the OpenAI API on the GPU (bench/gpu-serving.sh)
    "tinyllama-demo": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=None,
                           tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
}


def demo_vocab():
    """models/demo's vocabulary size, read from its config.json beside this script's tree"""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "models", "demo", "config.json"), encoding="utf-8") as f:
        return json.load(f)["vocab_size"]


def bf16_pool(n, rng):
    out = bytearray()
    pack = struct.Struct("<f").pack
    for _ in range(n):
        out += pack(rng.uniform(-0.05, 0.05))[2:4]  # truncation to bf16: fine for random data
    return bytes(out)


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    out = sys.argv[1]
    preset = "large"
    if len(sys.argv) >= 4 and sys.argv[2] == "--preset":
        preset = sys.argv[3]
    if preset not in PRESETS:
        sys.stderr.write("unknown preset %r\n" % preset)
        return 2
    c = dict(PRESETS[preset])
    if c["vocab_size"] is None:
        c["vocab_size"] = demo_vocab()
    os.makedirs(out, exist_ok=True)
    hd = c["hidden_size"] // c["num_attention_heads"]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
           "attention_bias": False, "mlp_bias": False, "head_dim": hd}
    cfg.update(c)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, f)

    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    tensors = [("model.embed_tokens.weight", [v, h])]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        tensors += [(p + "input_layernorm.weight", [h]),
                    (p + "self_attn.q_proj.weight", [q, h]),
                    (p + "self_attn.k_proj.weight", [kv, h]),
                    (p + "self_attn.v_proj.weight", [kv, h]),
                    (p + "self_attn.o_proj.weight", [h, q]),
                    (p + "post_attention_layernorm.weight", [h]),
                    (p + "mlp.gate_proj.weight", [inter, h]),
                    (p + "mlp.up_proj.weight", [inter, h]),
                    (p + "mlp.down_proj.weight", [h, inter])]
    tensors.append(("model.norm.weight", [h]))
    if not c["tie_word_embeddings"]:
        tensors.append(("lm_head.weight", [v, h]))

    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)

    rng = random.Random(1234)
    pool = bf16_pool(1 << 20, rng)
    one = struct.pack("<f", 1.0)[2:4]
    shift = 0
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape in tensors:
            n = 1
            for d in shape:
                n *= d
            if len(shape) == 1:
                f.write(one * n)
                continue
            left = 2 * n
            while left:
                start = (shift * 2) % len(pool)
                chunk = pool[start:start + left]
                f.write(chunk)
                left -= len(chunk)
                shift += 7919
    params = off // 2
    sys.stdout.write(json.dumps({"dir": out, "preset": preset, "params": params,
                                 "weight_bytes": off}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
