#!/usr/bin/env python3
"""gpu_bf16_emu.py MODEL_DIR IDS [STEPS] -- a bf16 Llama checkpoint's greedy decode of one prompt
(IDS: comma-separated token ids) in pure Python, twice: in fp32 (what the CPU graph and the
goldens compute) and with the activations rounded to bf16 where the CUDA engine's multi-row
calls round them (the inputs of every projection: both norms' outputs, the attention output,
silu(gate)*up, the final norm), the KV cache bf16 in both. Prints each step's top-1, top-2 and
margin per mode: a step whose margin the rounding alone moves near zero is one where the GPU may
flip without a fault (docs/cuda.md "Mixed steps"). Tiny fixtures only (no numpy; seconds for
tests/fixtures/models/tiny-llama-gqa)."""
import json, math, struct, sys
D = sys.argv[1].rstrip('/') + '/' if len(sys.argv) > 1 else ''

cfg=json.load(open(D+'config.json'))
raw=open(D+'model.safetensors','rb').read()
hl=struct.unpack('<Q',raw[:8])[0]; hdr=json.loads(raw[8:8+hl]); base=8+hl
def bf2f(u): return struct.unpack('<f',struct.pack('<I',u<<16))[0]
W={}
for k,v in hdr.items():
    if k=='__metadata__': continue
    a,b=v['data_offsets']; buf=raw[base+a:base+b]
    assert v['dtype']=='BF16', v['dtype']
    n=len(buf)//2; us=struct.unpack('<%dH'%n,buf)
    vals=[bf2f(u) for u in us]
    sh=v['shape']
    if len(sh)==2: W[k]=[vals[i*sh[1]:(i+1)*sh[1]] for i in range(sh[0])]
    else: W[k]=vals
def rbf(x):  # round fp32 to bf16 (RNE)
    u=struct.unpack('<I',struct.pack('<f',x))[0]
    u=(u+0x7fff+((u>>16)&1))&0xffff0000
    return struct.unpack('<f',struct.pack('<I',u))[0]
def f32(x): return struct.unpack('<f',struct.pack('<f',x))[0]
H=cfg['num_attention_heads']; KV=cfg['num_key_value_heads']; d=cfg['hidden_size']; hd=d//H; L=cfg['num_hidden_layers']; eps=cfg['rms_norm_eps']; th=cfg['rope_theta']
def mv(M,x): return [sum(a*b for a,b in zip(r,x)) for r in M]
def rms(x,w): s=sum(v*v for v in x)/len(x); r=1/math.sqrt(s+eps); return [v*r*g for v,g in zip(x,w)]
def rope(v,pos):
    out=list(v); half=hd//2
    for i in range(half):
        f=pos/(th**(2*i/hd)); c,s=math.cos(f),math.sin(f)
        a,b=v[i],v[i+half]; out[i]=a*c-b*s; out[i+half]=b*c+a*s
    return out
def run(tokens, gen, mode):
    R=(lambda v:[rbf(x) for x in v]) if mode=='bf16' else (lambda v:v)
    cache=[[] for _ in range(L)]  # per layer list of (k heads, v heads) bf16
    seq=list(tokens); outs=[]
    pos=0
    feed=list(tokens)
    while len(outs)<gen:
        for t in feed:
            x=list(W['model.embed_tokens.weight'][t])
            for l in range(L):
                p='model.layers.%d.'%l
                h=R(rms(x,W[p+'input_layernorm.weight']))
                q=mv(W[p+'self_attn.q_proj.weight'],h); k=mv(W[p+'self_attn.k_proj.weight'],h); v=mv(W[p+'self_attn.v_proj.weight'],h)
                ks=[ [rbf(z) for z in rope(k[j*hd:(j+1)*hd],pos)] for j in range(KV)]
                vs=[ [rbf(z) for z in v[j*hd:(j+1)*hd]] for j in range(KV)]
                cache[l].append((ks,vs))
                att=[]
                for hh in range(H):
                    qh=rope(q[hh*hd:(hh+1)*hd],pos); g=hh//(H//KV)
                    sc=[sum(a*b for a,b in zip(qh,c[0][g]))/math.sqrt(hd) for c in cache[l]]
                    m=max(sc); e=[math.exp(s-m) for s in sc]; z=sum(e)
                    o=[sum(e[i]*cache[l][i][1][g][j] for i in range(len(e)))/z for j in range(hd)]
                    att+=o
                att=R(att)
                o=mv(W[p+'self_attn.o_proj.weight'],att); x=[a+b for a,b in zip(x,o)]
                h=R(rms(x,W[p+'post_attention_layernorm.weight']))
                gt=mv(W[p+'mlp.gate_proj.weight'],h); up=mv(W[p+'mlp.up_proj.weight'],h)
                act=R([ (a/(1+math.exp(-a)))*b for a,b in zip(gt,up)])
                dn=mv(W[p+'mlp.down_proj.weight'],act); x=[a+b for a,b in zip(x,dn)]
            pos+=1
        xf=rms(x,W['model.norm.weight'])
        if mode=='bf16': xf=[rbf(z) for z in xf]
        lg=mv(W['lm_head.weight'],xf)
        srt=sorted(range(len(lg)),key=lambda i:-lg[i])
        outs.append((srt[0],srt[1],lg[srt[0]]-lg[srt[1]]))
        feed=[srt[0]]
    return outs

if len(sys.argv) < 3:
    sys.exit("usage: gpu_bf16_emu.py MODEL_DIR IDS [STEPS]")
prompt = [int(t) for t in sys.argv[2].split(",")]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 8
for mode in ("fp32", "bf16"):
    for i, (a, b, m) in enumerate(run(prompt, steps, mode)):
        print("%s step %d: top1 %d top2 %d margin %.5f" % (mode, i, a, b, m))
