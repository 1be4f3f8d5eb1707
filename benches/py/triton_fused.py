"""Hand-written fused Triton kernels for the weight-bound programs: the anchor of 'what a user
would write instead'. Correctness vs PyTorch first, then median time (do_bench, L2 flushed), next
to the memory floor.

Three kernels, each one pass over the weight with the epilogue fused, autotuned over block sizes,
warps and pipeline stages (the first eleven-case configurations, kept as they were):
  gated_mlp_k         silu(X @ W1) * (X @ W2)
  rmsnorm_linear_k    rms_norm(X) @ W          (the row sums of squares accumulated in the K loop)
  silu_gate_linear_k  (silu(G) * U) @ W        (the gate applied to each K tile of G and U)

Cases: the four weight-bound benchmark cases (set "bench") and the generality set ("generality",
the programs of benches/kernels/generality.rs and torch_baselines.py).

Usage: python3 triton_fused.py [case ...] [--set bench|generality|all] [--only SUBSTRING,...]
                               [--json TORCH.json]
With --json, each case's median is added as "triton" to its row of that file (the JSON of
torch_baselines.py from the same run), creating rows that are missing, so the GPU bench shows it.
"""
import json, os, sys
import torch, triton, triton.language as tl
from triton.testing import do_bench

configs = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
           for bn in (16, 32, 64) for bk in (128, 256) for w in (4, 8) for s in (3, 4, 6)]

@triton.autotune(configs=configs, key=["M", "N", "K"])
@triton.jit
def gated_mlp_k(x_ptr, w1_ptr, w2_ptr, o_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, PREC: tl.constexpr):
    pm = tl.program_id(1); pid = tl.program_id(0)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    a1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32); a2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        w1 = tl.load(w1_ptr + (k + rk)[:, None] * N + rn[None, :])
        w2 = tl.load(w2_ptr + (k + rk)[:, None] * N + rn[None, :])
        a1 += tl.dot(x, w1, input_precision=PREC); a2 += tl.dot(x, w2, input_precision=PREC)
    o = a1 * tl.sigmoid(a1) * a2
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], o.to(o_ptr.dtype.element_ty), mask=rm[:, None] < M)

@triton.autotune(configs=configs, key=["M", "N", "K"])
@triton.jit
def rmsnorm_linear_k(x_ptr, w_ptr, o_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PREC: tl.constexpr):
    pm = tl.program_id(1); pid = tl.program_id(0)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32); ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        w = tl.load(w_ptr + (k + rk)[:, None] * N + rn[None, :])
        xf = x.to(tl.float32); ss += tl.sum(xf * xf, axis=1)
        acc += tl.dot(x, w, input_precision=PREC)
    o = acc / tl.sqrt(ss / K)[:, None]
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], o.to(o_ptr.dtype.element_ty), mask=rm[:, None] < M)

@triton.autotune(configs=configs, key=["M", "N", "K"])
@triton.jit
def silu_gate_linear_k(g_ptr, u_ptr, w_ptr, o_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, PREC: tl.constexpr):
    pm = tl.program_id(1); pid = tl.program_id(0)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        g = tl.load(g_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0).to(tl.float32)
        a = (g * tl.sigmoid(g) * u).to(w_ptr.dtype.element_ty)
        w = tl.load(w_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, w, input_precision=PREC)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(o_ptr.dtype.element_ty), mask=rm[:, None] < M)

def rms_norm(x):
    xf = x.float(); return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True))).to(x.dtype)

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
def r(*s, dtype=torch.float16): return torch.randn(*s, dtype=dtype, device="cuda")

def launch(kernel, ins, out, m, n, k):
    block_m = 16 if m <= 16 else 64
    prec = "ieee" if out.dtype == torch.float32 else "tf32"
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, block_m))
    return lambda: kernel[grid](*ins, out, m, n, k, BLOCK_M=block_m, PREC=prec)

# name -> (inputs, reference, kernel, (M, N, K)); weights [in, out], the scales of torch_baselines.py
CASES = {}
SETS = {"bench": [], "generality": []}
def case(name, make, ref, kernel, mnk, group):
    CASES[name] = (make, ref, kernel, mnk); SETS[group].append(name)

for b in (1, 8):
    case(f"gated_mlp_bs{b}", lambda b=b: (r(b, 4096), r(4096, 4096) * 0.02, r(4096, 4096) * 0.02),
         lambda x, w1, w2: torch.nn.functional.silu(x @ w1) * (x @ w2), gated_mlp_k, (b, 4096, 4096), "bench")
    case(f"rmsnorm_linear_bs{b}", lambda b=b: (r(2 * b, 4096), r(4096, 6144) * 0.02),
         lambda x, w: rms_norm(x) @ w, rmsnorm_linear_k, (2 * b, 6144, 4096), "bench")
MODELS = [("llama1b", 2048, 8192, 3072), ("qwen06b", 1024, 3072, 4096), ("qwen7b", 3584, 18944, 4608)]
for m, hd, idim, qd in MODELS:
    for dn in ("bf16", "f16"):
        dt = DTYPES[dn]
        for rows in (1, 16):
            case(f"{m}_qkv_r{rows}_{dn}", lambda rows=rows, hd=hd, qd=qd, dt=dt: (r(rows, hd, dtype=dt), r(hd, qd, dtype=dt) * 0.02),
                 lambda x, w: rms_norm(x) @ w, rmsnorm_linear_k, (rows, qd, hd), "generality")
            case(f"{m}_gateup_r{rows}_{dn}",
                 lambda rows=rows, hd=hd, idim=idim, dt=dt: (r(rows, hd, dtype=dt), r(hd, idim, dtype=dt) * 0.02, r(hd, idim, dtype=dt) * 0.02),
                 lambda x, w1, w2: torch.nn.functional.silu(x @ w1) * (x @ w2), gated_mlp_k, (rows, idim, hd), "generality")
            case(f"{m}_down_r{rows}_{dn}",
                 lambda rows=rows, hd=hd, idim=idim, dt=dt: (r(rows, idim, dtype=dt), r(rows, idim, dtype=dt), r(idim, hd, dtype=dt) * 0.02),
                 lambda g, u, w: (torch.nn.functional.silu(g) * u) @ w, silu_gate_linear_k, (rows, hd, idim), "generality")
case("llama1b_gateup_r8_f32",
     lambda: (r(8, 2048, dtype=torch.float32), r(2048, 8192, dtype=torch.float32) * 0.02, r(2048, 8192, dtype=torch.float32) * 0.02),
     lambda x, w1, w2: torch.nn.functional.silu(x @ w1) * (x @ w2), gated_mlp_k, (8, 8192, 2048), "generality")

def main():
    argv = sys.argv[1:]
    def option(flag, default=None):
        if flag in argv:
            i = argv.index(flag); value = argv[i + 1]; del argv[i:i + 2]; return value
        return default
    out = option("--json")
    which = option("--set", "bench")
    only = [o for o in option("--only", "").split(",") if o]
    unknown = [a for a in argv if a not in CASES]
    if unknown or which not in ("bench", "generality", "all"):
        sys.exit(f"unknown cases {unknown} or set {which!r}; sets: bench, generality, all; cases: {', '.join(CASES)}")
    pool = list(CASES) if which == "all" else SETS[which]
    names = argv or [n for n in pool if not only or any(o in n for o in only)]
    rows = {}
    bw = 4.2e12
    for name in names:
        make, ref_fn, kernel, (m, n, k) = CASES[name]
        ins = make()
        out_t = torch.empty(m, n, dtype=ins[0].dtype, device="cuda")
        f = launch(kernel, ins, out_t, m, n, k)
        f(); ref = ref_fn(*ins)
        err = ((out_t.float() - ref.float()).norm() / ref.float().norm()).item()
        t = do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3
        io = sum(x.numel() * x.element_size() for x in ins) + out_t.numel() * out_t.element_size()
        print(f"triton {name}: {t:.1f} us (rel err {err:.1e}, floor {io / bw * 1e6:.1f} us at 4.2 TB/s) best {kernel.best_config}", flush=True)
        rows[name] = dict(us=t, rel_err=err, config=str(kernel.best_config))
        del ins, out_t, ref
    if out:
        doc = json.load(open(out)) if os.path.exists(out) else dict(rows={})
        for name, row in rows.items():
            doc.setdefault("rows", {}).setdefault(name, {})["triton"] = row["us"]
            doc["rows"][name]["triton_rel_err"] = row["rel_err"]
        json.dump(doc, open(out, "w"), indent=1)

if __name__ == "__main__":
    main()
