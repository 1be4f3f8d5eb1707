"""PyTorch anchors for the benchmark programs, timed on the GPU.

For each program (shapes of the Mirage benchmark set) this prints the median time of:
  eager    - PyTorch eager, one call
  graph    - the same calls captured once as a CUDA graph and replayed
  compile  - torch.compile(mode="max-autotune-no-cudagraphs")
  sdpa     - attention programs only: F.scaled_dot_product_attention (FlashAttention path), its
             inputs laid out once, outside timing, as it expects (K contiguous as [b, n, d])
and two lower bounds:
  floor    - bytes of every input read once and every output written once, at the copy
             bandwidth measured in the same run
  launch   - one tiny kernel launched and timed the same way (the cost of any single launch)
Timing: triton.testing.do_bench (CUDA events, L2 flushed before each call, median).

The cases: the eighteen benchmark programs (set "bench": the eleven of Mirage's set, then q/k
projection + RoPE at 1 and 8 rows, LM head + argmax, q/k/v projection with q and k roped at 1
and 8 rows, LayerNorm + projection at 1 and 8 rows) and the generality set ("generality": the
decode-time QKV, gate/up and down projections of Llama-3.2-1B, Qwen3-0.6B and Qwen2.5-7B at 1 and
16 rows in bf16 and f16, and an f32 gated MLP; the same programs as
benches/kernels/generality.rs) and the corpus ("corpus": norm + QKV, attention output + residual,
norm + gated MLP, down + residual, the whole MLP block and final norm + LM head of Llama-3.2-1B,
Qwen2.5-0.5B and Mistral-7B at 1 and 16 rows in bf16, as written; benches/kernels/corpus.rs)
and decode attention ("attention": one decode step with the safe softmax, softmax(q.k / sqrt(d)) v,
32 heads x 1 query row x 4096 keys x head dim 128 in bf16 and f16, grouped-query with 8 KV
heads of 4, 8 and 16 query rows, 512 to 32768 keys, head dims 64 and 128 (ATTENTION_FAMILY);
benches/kernels/attention.rs; sdpa takes q as [1, heads, rows, d] and
K, V as [1, heads, keys, d], its default scale 1/sqrt(d)) and the same attention at 512, 4096 and
32768 keys ("dims": rows `attn_decode_over_s@S` of the bench's runtime-sized attention rows).

Usage (on a machine with a GPU and PyTorch):
  python3 torch_baselines.py [case ...] [--set bench|generality|corpus|attention|dims|all] [--only SUBSTRING,...]
                             [--compile-mode MODE] [--json OUT.json]
Named cases are run as given; otherwise every case of the set whose name contains
one of the --only substrings (default set: bench). torch.compile's max-autotune takes tens of seconds per new shape:
split the generality set over calls with --only (e.g. --only llama1b, then qwen06b, qwen7b).
"""
import sys, json, os
import torch
import torch.nn.functional as F
from triton.testing import do_bench

dev, h = "cuda", torch.float16
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
def r(*s, dtype=h): return torch.randn(*s, dtype=dtype, device=dev)

def rms_norm(x):  # the benchmark programs' rms_norm: last dim, no epsilon, no weight
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True))).to(x.dtype)

def attention(q, k, v):  # q[b,m,d] k[b,d,n] v[b,n,d]: softmax written as exp / sum
    e = torch.exp(q @ k)
    return (e / e.sum(dim=2, keepdim=True)) @ v

def sdpa_layout(q, k, v):  # once, outside timing: K as [b, n, d] contiguous, a head axis of 1
    return q.unsqueeze(1), k.transpose(1, 2).contiguous().unsqueeze(1), v.unsqueeze(1)

def sdpa(q4, k4, v4):  # F.scaled_dot_product_attention on the layout it expects (flash path)
    return F.scaled_dot_product_attention(q4, k4, v4, scale=1.0).squeeze(1)

CASES = {}
LAYOUTS = {}  # a case's sdpa layout when it is not sdpa_layout
SETS = {"bench": [], "generality": [], "corpus": [], "attention": [], "dims": []}
def case(name, make, fn, alt=None, group="bench"):
    CASES[name] = (make, fn, alt)
    SETS[group].append(name)

for b in (1, 8):
    case(f"gated_mlp_bs{b}", lambda b=b: (r(b, 4096), r(4096, 4096) * 0.02, r(4096, 4096) * 0.02),
         lambda x, w1, w2: F.silu(x @ w1) * (x @ w2))
    case(f"rmsnorm_linear_bs{b}", lambda b=b: (r(2 * b, 4096), r(4096, 6144) * 0.02),
         lambda x, w: rms_norm(x) @ w)
    case(f"gqa_bs{b}", lambda b=b: (r(2 * b, 256, 64) * 0.1, r(2 * b, 64, 4096) * 0.1, r(2 * b, 4096, 64)),
         attention, sdpa)
    case(f"qknorm_gqa_bs{b}", lambda b=b: (r(2 * b, 256, 64), r(2 * b, 64, 4096) * 0.1, r(2 * b, 4096, 64)),
         lambda q, k, v: attention(rms_norm(q), k, rms_norm(v)),
         lambda q, k, v: sdpa(rms_norm(q), k, rms_norm(v)))  # inputs already in sdpa_layout
    case(f"ntrans_bs{b}", lambda b=b: (r(8 * b, 4096), r(8 * b, 4096), r(8 * b, 4096)),
         lambda hh, x, al: rms_norm(x + al * (rms_norm(hh) + x)))
case("lora", lambda: (r(16, 256), r(256, 4096) * 0.05, r(256, 16) * 0.05, r(16, 4096) * 0.05),
     lambda x, w, a, bb: x @ w + (x @ a) @ bb)

def rope(x, cos, sin):  # half-split rotary embedding of every head of 2 * cos.shape[-1] elements
    half = cos.shape[-1]
    xs = x.unflatten(-1, (-1, 2 * half))
    a, b = xs[..., :half], xs[..., half:]
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1).flatten(-2)

def angles(rows):  # cos and sin of one random position per row, Llama's frequencies (theta 5e5)
    pos = torch.randint(0, 4096, (rows, 1), device=dev).float()
    inv = 500000.0 ** (-torch.arange(32, device=dev).float() / 32)
    a = pos * inv
    return torch.cos(a).to(h), torch.sin(a).to(h)

# Llama-3.2-1B's q and k projections (32 and 8 heads of 64) with their RoPE; an LM head of 2048 x 32768 and greedy argmax.
for b in (1, 8):
    case(f"qk_rope_bs{b}", lambda b=b: (r(b, 2048), r(2048, 2560) * 0.02, *angles(b)),
         lambda x, wqk, cos, sin: rope(x @ wqk, cos, sin))
case("lm_head_argmax", lambda: (r(1, 2048), r(2048, 32768) * 0.02),
     lambda hh, w: torch.argmax(hh @ w, dim=1, keepdim=True))
# The same q/k projections with v's (8 heads of 64) as a second, unrotated result; GPT-2's
# LayerNorm (weight, bias, eps 1e-5) and its QKV projection (768 -> 2304).
for b in (1, 8):
    case(f"qkv_rope_bs{b}", lambda b=b: (r(b, 2048), r(2048, 2560) * 0.02, r(2048, 512) * 0.02, *angles(b)),
         lambda x, wqk, wv, cos, sin: (rope(x @ wqk, cos, sin), x @ wv))
    case(f"layernorm_linear_bs{b}", lambda b=b: (r(b, 768), r(1, 768), r(1, 768), r(768, 2304) * 0.02),
         lambda x, g, bb, w: F.layer_norm(x, (768,), g[0], bb[0], 1e-5) @ w)

# The generality set: (name, hidden, intermediate, QKV width) of each model; weights [in, out].
MODELS = [("llama1b", 2048, 8192, 3072), ("qwen06b", 1024, 3072, 4096), ("qwen7b", 3584, 18944, 4608)]
def gated_mlp(x, wg, wu): return F.silu(x @ wg) * (x @ wu)
def silu_gate_linear(g, u, w): return (F.silu(g) * u) @ w
for m, hd, idim, qd in MODELS:
    for dn in ("bf16", "f16"):
        for rows in (1, 16):
            dt = DTYPES[dn]
            case(f"{m}_qkv_r{rows}_{dn}", lambda rows=rows, hd=hd, qd=qd, dt=dt: (r(rows, hd, dtype=dt), r(hd, qd, dtype=dt) * 0.02),
                 lambda x, w: rms_norm(x) @ w, group="generality")
            case(f"{m}_gateup_r{rows}_{dn}",
                 lambda rows=rows, hd=hd, idim=idim, dt=dt: (r(rows, hd, dtype=dt), r(hd, idim, dtype=dt) * 0.02, r(hd, idim, dtype=dt) * 0.02),
                 gated_mlp, group="generality")
            case(f"{m}_down_r{rows}_{dn}",
                 lambda rows=rows, hd=hd, idim=idim, dt=dt: (r(rows, idim, dtype=dt), r(rows, idim, dtype=dt), r(idim, hd, dtype=dt) * 0.02),
                 silu_gate_linear, group="generality")
case("llama1b_gateup_r8_f32",
     lambda: (r(8, 2048, dtype=torch.float32), r(2048, 8192, dtype=torch.float32) * 0.02, r(2048, 8192, dtype=torch.float32) * 0.02),
     gated_mlp, group="generality")

# The corpus: decode-time pieces of a pre-norm layer as written (benches/kernels/corpus.rs):
# (name, hidden, intermediate, QKV width, vocabulary) of each model, bf16, weights [in, out].
CORPUS = [("llama1b", 2048, 8192, 3072, 128256), ("qwen05b", 896, 4864, 1152, 151936),
          ("mistral7b", 4096, 14336, 6144, 32000)]
def norm_gain(x, g): return rms_norm(x) * g
def mlp_block(x, g, wg, wu, wd):
    xn = norm_gain(x, g)
    return x + (F.silu(xn @ wg) * (xn @ wu)) @ wd
for m, hd, idim, qd, voc in CORPUS:
    dt = torch.bfloat16
    for rows in (1, 16):
        s = f"r{rows}_bf16"
        act = lambda *shape: r(*shape, dtype=dt)
        wt = lambda *shape: r(*shape, dtype=dt) * 0.02
        case(f"{m}_norm_qkv_{s}", lambda rows=rows, hd=hd, qd=qd, act=act, wt=wt: (act(rows, hd), act(1, hd), wt(hd, qd)),
             lambda x, g, w: norm_gain(x, g) @ w, group="corpus")
        case(f"{m}_o_resid_{s}", lambda rows=rows, hd=hd, act=act, wt=wt: (act(rows, hd), act(rows, hd), wt(hd, hd)),
             lambda x, o, w: x + o @ w, group="corpus")
        case(f"{m}_norm_gated_{s}",
             lambda rows=rows, hd=hd, idim=idim, act=act, wt=wt: (act(rows, hd), act(1, hd), wt(hd, idim), wt(hd, idim)),
             lambda x, g, wg, wu: gated_mlp(norm_gain(x, g), wg, wu), group="corpus")
        case(f"{m}_down_resid_{s}",
             lambda rows=rows, hd=hd, idim=idim, act=act, wt=wt: (act(rows, hd), act(rows, idim), act(rows, idim), wt(idim, hd)),
             lambda x, a, b, w: x + silu_gate_linear(a, b, w), group="corpus")
        case(f"{m}_mlp_block_{s}",
             lambda rows=rows, hd=hd, idim=idim, act=act, wt=wt: (act(rows, hd), act(1, hd), wt(hd, idim), wt(hd, idim), wt(idim, hd)),
             mlp_block, group="corpus")
        case(f"{m}_norm_lm_head_{s}", lambda rows=rows, hd=hd, voc=voc, act=act, wt=wt: (act(rows, hd), act(1, hd), wt(hd, voc)),
             lambda x, g, w: norm_gain(x, g) @ w, group="corpus")

# Decode attention with the safe softmax (benches/kernels/attention.rs): q [heads, rows, d],
# k [heads, d, keys] (as q.matmul(k) takes it), v [heads, keys, d]; rows are one query row per
# head, or the query heads of a GQA group sharing their KV head. sdpa gets its own layout, made
# once outside timing: q [1, heads, rows, d], K and V [1, heads, keys, d] contiguous.
def safe_attention(q, k, v):
    return torch.softmax((q @ k) * q.shape[-1] ** -0.5, dim=-1) @ v
def decode_layout(q, k, v):
    return q.unsqueeze(0), k.transpose(1, 2).contiguous().unsqueeze(0), v.unsqueeze(0)
def decode_sdpa(q4, k4, v4):
    return F.scaled_dot_product_attention(q4, k4, v4).squeeze(0)
# (heads, rows per head, name tag, keys, head dim, dtype): the family of the attention issue —
# 1, 4, 8 and 16 query rows per KV head, 512 to 32768 keys, head dims 64 and 128, bf16 and f16.
ATTENTION_FAMILY = (
    (32, 1, "h32", 4096, 128, "bf16"), (32, 1, "h32", 4096, 128, "f16"), (8, 4, "gqa_kv8_g4", 4096, 128, "bf16"),
    (8, 8, "gqa_kv8_g8", 4096, 128, "bf16"), (8, 16, "gqa_kv8_g16", 4096, 128, "bf16"),
    (8, 4, "gqa_kv8_g4", 4096, 128, "f16"), (8, 4, "gqa_kv8_g4", 512, 128, "bf16"),
    (8, 4, "gqa_kv8_g4", 32768, 128, "bf16"), (32, 1, "h32", 4096, 64, "bf16"), (8, 4, "gqa_kv8_g4", 4096, 64, "bf16"),
)
for heads, rows, tag, keys, d, dn in ATTENTION_FAMILY:
    dt = DTYPES[dn]
    name = f"attn_decode_{tag}_n{keys}_d{d}_{dn}" if rows == 1 else f"attn_{tag}_n{keys}_d{d}_{dn}"
    case(name, lambda heads=heads, rows=rows, keys=keys, d=d, dt=dt: (r(heads, rows, d, dtype=dt), r(heads, d, keys, dtype=dt), r(heads, keys, d, dtype=dt)),
         safe_attention, decode_sdpa, group="attention")
    LAYOUTS[name] = decode_layout
# The same attention over a key length chosen at launch (benches/kernels/dims.rs, the `dims`
# group's attention rows): 32 heads of one row, head dim 128, bf16, at the key lengths its fixed
# builds have; the bench reads row `attn_decode_over_s@S`.
for keys in (512, 4096, 32768):
    name = f"attn_decode_over_s@{keys}"
    bf = torch.bfloat16
    case(name, lambda keys=keys, bf=bf: (r(32, 1, 128, dtype=bf), r(32, 128, keys, dtype=bf), r(32, keys, 128, dtype=bf)),
         safe_attention, decode_sdpa, group="dims")
    LAYOUTS[name] = decode_layout

def nbytes(ts):
    ts = ts if isinstance(ts, (tuple, list)) else (ts,)
    return sum(t.numel() * t.element_size() for t in ts)

def graph_replay(fn, args):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn(*args)
    return g.replay

def bench(f): return do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3  # microseconds

def main():
    argv = sys.argv[1:]
    def option(flag, default=None):
        if flag in argv:
            i = argv.index(flag); value = argv[i + 1]; del argv[i:i + 2]; return value
        return default
    out = option("--json")
    which = option("--set", "bench")
    only = [o for o in option("--only", "").split(",") if o]
    mode = option("--compile-mode", "max-autotune-no-cudagraphs")
    unknown = [a for a in argv if a not in CASES]
    if unknown or which not in (*SETS, "all"):
        sys.exit(f"unknown cases {unknown} or set {which!r}; sets: {', '.join(SETS)}, all; cases: {', '.join(CASES)}")
    pool = list(CASES) if which == "all" else SETS[which]
    names = argv or [n for n in pool if not only or any(o in n for o in only)]
    x = torch.empty(2 * 1024**3, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
    bw = 2 * x.numel() / (bench(lambda: y.copy_(x)) * 1e-6)
    del x, y
    tiny = torch.zeros(1, device=dev)
    launch = bench(lambda: tiny.add_(1))
    print(f"device {torch.cuda.get_device_name()}  copy {bw/1e12:.2f} TB/s  launch {launch:.1f} us", flush=True)
    rows = {}
    for name in names:
        make, fn, alt = CASES[name]
        args = make()
        res = fn(*args)
        row = dict(eager=bench(lambda: fn(*args)), graph=bench(graph_replay(fn, args)))
        cfn = torch.compile(fn, mode=mode)
        for _ in range(2): cfn(*args)
        row["compile"] = bench(lambda: cfn(*args))
        if alt is not None:
            row["sdpa"] = bench(graph_replay(alt, LAYOUTS.get(name, sdpa_layout)(*args)))
        row["floor"] = (nbytes(args) + nbytes(res)) / bw * 1e6
        row["launch"] = launch
        row["best_torch"] = min(v for k, v in row.items() if k in ("eager", "graph", "compile", "sdpa"))
        rows[name] = row
        print(f"{name:22s} " + "  ".join(f"{k} {v:7.1f}" for k, v in row.items()), flush=True)
        del args, res
        torch._dynamo.reset()  # one compiled graph per case: keep the caches of many cases bounded
    if out:
        json.dump(dict(device=torch.cuda.get_device_name(), copy_bw=bw, launch_us=launch, compile_mode=mode, rows=rows),
                  open(out, "w"), indent=1)

if __name__ == "__main__":
    main()
