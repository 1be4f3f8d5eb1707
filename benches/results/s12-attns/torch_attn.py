# The record of what change 27's run used (kept as run). For new runs: `torch_baselines.py --set dims`
# has these cases, with torch.compile as well.
# PyTorch beside the `dims_attention` rows of the GPU bench (change 27): the device's copy
# bandwidth and one launch (as torch_baselines.py measures them), then decode attention at the
# issue's shape (32 heads x 1 row, head dim 128, bf16, K [heads, d, S], V [heads, S, d]) at
# S = 512, 4096, 32768: eager, CUDA graph, and scaled_dot_product_attention (its own layout, made
# outside timing, graph-replayed). torch.compile is not run (the device call's time limit).
# Writes the torch JSON the bench reads (--torch): copy_bw, launch_us, rows.
import json, sys
import torch
import torch.nn.functional as F
from triton.testing import do_bench

dev = "cuda"
def bench(f): return do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3
def graph_replay(fn, args):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn(*args)
    return g.replay
def safe_attention(q, k, v): return torch.softmax((q @ k) * q.shape[-1] ** -0.5, dim=-1) @ v
def sdpa(q4, k4, v4): return F.scaled_dot_product_attention(q4, k4, v4).squeeze(0)

x = torch.empty(2 * 1024**3, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
bw = 2 * x.numel() / (bench(lambda: y.copy_(x)) * 1e-6)
del x, y
tiny = torch.zeros(1, device=dev)
launch = bench(lambda: tiny.add_(1))
print(f"device {torch.cuda.get_device_name()}  copy {bw/1e12:.2f} TB/s  launch {launch:.1f} us", flush=True)
rows = {}
for s in (512, 4096, 32768):
    g = torch.Generator(device=dev).manual_seed(s)
    q = torch.randn(32, 1, 128, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(32, 128, s, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(32, s, 128, device=dev, dtype=torch.bfloat16, generator=g)
    args = (q, k, v)
    row = dict(eager=bench(lambda: safe_attention(*args)), graph=bench(graph_replay(safe_attention, args)))
    lay = (q.unsqueeze(0), k.transpose(1, 2).contiguous().unsqueeze(0), v.unsqueeze(0))
    row["sdpa"] = bench(graph_replay(sdpa, lay))
    row["best_torch"] = min(row.values())
    rows[f"attn_decode_over_s@{s}"] = row
    print(f"S = {s:5}  " + "  ".join(f"{k} {v:7.1f}" for k, v in row.items()), flush=True)
    del q, k, v, args, lay
json.dump(dict(device=torch.cuda.get_device_name(), copy_bw=bw, launch_us=launch, rows=rows), open(sys.argv[1], "w"), indent=1)
