#!/usr/bin/env python3
"""Runs the Triton modules mirage generated against the expected outputs of its CPU reference.

The folder (written by `cargo run --release -p mirage-rs-cli --example triton_pack -- DIR`) holds
`manifest.json`, one Python module per µGraph (`modules/*.py`, each with a `launch(...)` taking
torch tensors) and the reference's outputs as raw little-endian f32 (`expected/*.f32`). Inputs are
not stored: they are regenerated here from the seeds in the manifest with the same integer hash
the Rust side used, checked against its checksums, rounded to the element type, and laid out with
the program's strides.

For every program and every module: launch, compare each output with the reference with the
tolerances the manifest carries (mirage::testing::compare's: every element within
atol + rtol·|want|, the relative L2 error within its bound; NaN or infinity fails), and time the
modules of the timed groups (`--time`, default `bench`) as our GPU bench times our kernels
(mirage_runtime::time_median: CUDA events around each launch, the L2 flushed before each,
median of `--iters` launches after 25 warm-up launches).

The bench table (`triton-bench.md` next to `--json`) puts each timed module beside our CUDA
kernel and the best PyTorch variant of the same GPU run: `--bench-json` (benches/gpu.rs's
gpu-bench.json) and `--torch-json` (torch_baselines.py's JSON) name them; `--bench` runs them
first (`.gpu/torch_baselines.py` and the `.gpu/bin/bench/gpu-*` binary that scripts/gpu-pack.sh
packs), so one device call checks every module and produces the table:

  python3 .gpu/triton/triton_check.py .gpu/triton --jobs 16 --json $OUT/triton.json --bench $OUT

  python3 scripts/triton_check.py DIR [--groups G,..] [--only REGEX] [--time GROUPS|none] [--jobs N]
                                      [--iters N] [--bench OUT_DIR | --bench-json F --torch-json F]
                                      [--json OUT]
  python3 scripts/triton_check.py DIR --interpret   # no GPU: Triton's interpreter on numpy

Compilation dominates the first run: `--jobs N` (default 8) compiles the modules in N worker
processes first (they fill Triton's on-disk cache), then everything runs in this process.
Exit status: 0 when every selected module matches, 1 otherwise.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import sys
import time
import traceback

M32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Inputs: the integer hash both sides use (values in [-range, range), exact in f32).

def hash_values(xp, n, seed, lo, hi):
    """The f32 values of a tensor of n elements: x = hash(i, seed), h = (x >> 8) / 2^24, v = lo + h * (hi - lo)."""
    if xp.__name__ == "torch":
        i = xp.arange(n, dtype=xp.int64, device="cuda")
    else:
        i = xp.arange(n, dtype=xp.int64)
    x = (i * 0x9E3779B1 + seed) & M32
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & M32
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & M32
    x = x ^ (x >> 16)
    if xp.__name__ == "torch":
        h = (x >> 8).to(xp.float32) * (1.0 / 16777216.0)
        lo_t = xp.tensor(lo, dtype=xp.float32, device=h.device)
        width = xp.tensor(hi, dtype=xp.float32) - xp.tensor(lo, dtype=xp.float32)
        return h * width.to(h.device) + lo_t
    import numpy as np
    h = (x >> 8).astype(np.float32) * np.float32(1.0 / 16777216.0)
    width = np.float32(hi) - np.float32(lo)
    return (h * width).astype(np.float32) + np.float32(lo)


# ---------------------------------------------------------------------------------------------
# Back ends: torch on a CUDA device, or numpy under Triton's interpreter.

class TorchBackend:
    name = "cuda"

    def __init__(self):
        import torch
        self.torch = torch
        self.flush = None
        self.dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}

    def make_input(self, spec):
        torch = self.torch
        n = math.prod(spec["shape"])
        v = hash_values(torch, n, spec["seed"], *spec["range"])
        checksum = float(v.double().sum())
        first = [float(x) for x in v[:4].cpu()]
        # i32 ids round down, as mirage's DType::round does.
        r = torch.floor(v) if spec["dtype"] == "i32" else v
        t = r.to(self.dtypes[spec["dtype"]]).reshape(spec["shape"])
        dev = torch.empty_strided(spec["shape"], spec["strides"], dtype=t.dtype, device="cuda")
        dev.copy_(t)
        return dev, checksum, first

    def load_expected(self, path, shape):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        return self.torch.frombuffer(data, dtype=self.torch.float32).reshape(shape).to("cuda")

    def compare(self, got, want, tol):
        """(rel L2 error, elements outside atol + rtol·|want|): mirage::testing::compare's check."""
        torch = self.torch
        g = got.double()
        w = want.double()
        bad = int((~torch.isfinite(g)).sum())
        if bad:
            return math.inf, bad
        outside = int(((g - w).abs() > tol["atol"] + tol["rtol"] * w.abs()).sum())
        return float((g - w).norm() / max(float(w.norm()), 1e-30)), outside

    def sync(self):
        self.torch.cuda.synchronize()

    def time_us(self, fn, warmup, iters):
        """Median of `iters` launches timed with CUDA events, the L2 flushed before each (a write
        of max(2 x L2, 256 MiB)), after `warmup` launches: mirage_runtime::time_median's method."""
        torch = self.torch
        if self.flush is None:
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
            self.flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device="cuda")
        for _ in range(warmup):
            fn()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, end in events:
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        samples = sorted(s.elapsed_time(e) * 1e3 for s, e in events)
        n = len(samples)
        median = samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
        return dict(median=median, min=samples[0], max=samples[-1], samples=n)


class NumpyBackend:
    """Runs the modules in Triton's interpreter (TRITON_INTERPRET=1) with numpy arrays posing as
    CUDA tensors: a stand-in `torch` module with just what the generated launchers use."""
    name = "interpreter"

    def __init__(self):
        import numpy as np
        self.np = np
        os.environ["TRITON_INTERPRET"] = "1"
        sys.modules["torch"] = _fake_torch(np)
        from triton.runtime import interpreter
        # The stand-in tensors already live in host memory: no copies to and from a device.
        interpreter.GridExecutor._init_args_hst = lambda self, args, kwargs: (list(args), dict(kwargs))
        interpreter.GridExecutor._restore_args_dev = lambda self, *args: None
        # Two gaps of the interpreter (the compiled kernels have neither): tl.dot multiplies the
        # raw bits of bf16 operands, and libdevice functions are stubs. bf16 operands are widened
        # to f32 first; pow becomes exp2(b·log2(a)), exact for the positive bases of the checks, and
        # tanh 2 / (1 + exp(-2x)) - 1.
        import triton.language as tl
        dot = interpreter.InterpreterBuilder.create_dot

        def widened(h):
            if str(h.dtype) != "bf16":
                return h
            bits = h.data.astype(np.uint32) << 16
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

        interpreter.InterpreterBuilder.create_dot = lambda self, a, b, *rest: dot(self, widened(a), widened(b), *rest)
        from triton.language.extra import libdevice
        libdevice.pow = lambda a, b: tl.exp2(b * tl.log2(a))
        libdevice.tanh = lambda x: 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0
        self.torch = sys.modules["torch"]

    def make_input(self, spec):
        np = self.np
        n = math.prod(spec["shape"])
        v = hash_values(np, n, spec["seed"], *spec["range"])
        checksum = float(v.astype(np.float64).sum())
        first = [float(x) for x in v[:4]]
        t = self.torch.empty_strided(spec["shape"], spec["strides"], dtype=self.torch.DTYPES[spec["dtype"]])
        t.set_logical((np.floor(v) if spec["dtype"] == "i32" else v).reshape(spec["shape"]))
        return t, checksum, first

    def load_expected(self, path, shape):
        return self.np.fromfile(path, dtype="<f4").reshape(shape)

    def compare(self, got, want, tol):
        np = self.np
        g = got.logical().astype(np.float64)
        if not np.isfinite(g).all():
            return math.inf, int((~np.isfinite(g)).sum())
        w = want.astype(np.float64)
        outside = int((np.abs(g - w) > tol["atol"] + tol["rtol"] * np.abs(w)).sum())
        return float(np.linalg.norm(g - w) / max(float(np.linalg.norm(w)), 1e-30)), outside

    def sync(self):
        pass

    def time_us(self, fn, warmup, iters):
        return None


def _fake_torch(np):
    import types

    class DType:
        def __init__(self, name, storage):
            self.name, self.storage = name, storage

        def __str__(self):
            return f"torch.{self.name}"

        __repr__ = __str__

    f16, bf16, f32 = DType("float16", np.float16), DType("bfloat16", np.uint16), DType("float32", np.float32)
    i32 = DType("int32", np.int32)

    def to_bf16_bits(v):
        b = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)

    class Tensor:
        def __init__(self, shape, strides, dtype):
            self.shape, self._strides, self.dtype = tuple(shape), tuple(strides), dtype
            span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
            self.storage = np.zeros(span, dtype=dtype.storage)
            self.is_cuda, self.device = True, "cuda:0"

        def stride(self):
            return self._strides

        def data_ptr(self):
            return self.storage.ctypes.data

        def _view(self):
            item = self.storage.itemsize
            return np.lib.stride_tricks.as_strided(self.storage, self.shape, [s * item for s in self._strides])

        def set_logical(self, values):
            if self.dtype is bf16:
                self._view()[...] = to_bf16_bits(values)
            else:
                self._view()[...] = values.astype(self.dtype.storage)

        def logical(self):
            v = self._view()
            if self.dtype is bf16:
                return (v.astype(np.uint32) << 16).view(np.float32)
            return v.astype(np.float32)

        def copy_(self, other):
            self.set_logical(other.logical())
            return self

    m = types.ModuleType("torch")
    m.Tensor, m.float16, m.bfloat16, m.float32, m.int32 = Tensor, f16, bf16, f32, i32
    m.DTYPES = {"f16": f16, "bf16": bf16, "f32": f32, "i32": i32}
    m.device = lambda name="cuda:0": name
    m.empty_strided = lambda shape, strides, dtype=f32, device=None: Tensor(shape, strides, dtype)
    return m


# ---------------------------------------------------------------------------------------------

def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def selected(manifest, only, groups):
    pat = re.compile(only) if only else None
    for prog in manifest["programs"]:
        if groups and prog["group"] not in groups:
            continue
        mods = [m for m in prog["modules"] if pat is None or pat.search(m["name"]) or pat.search(prog["name"])]
        if mods:
            yield prog, mods


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def warm_worker(args):
    """Compiles (by launching once) the modules of one program in a worker process."""
    root, prog, mods = args
    errors = []
    try:
        be = TorchBackend()
        inputs = [be.make_input(s)[0] for s in prog["inputs"]]
        for m in mods:
            try:
                load_module(os.path.join(root, m["file"]), m["name"]).launch(*inputs)
                be.sync()
            except Exception as e:  # reported again, with details, by the main process
                errors.append(f"{m['name']}: {type(e).__name__}")
    except Exception as e:
        errors.append(f"{prog['name']}: {type(e).__name__}: {e}")
    return errors


def run_bench(out_dir, iters):
    """Runs the PyTorch anchors and our CUDA bench binary of .gpu/ (scripts/gpu-pack.sh) into
    out_dir; returns the paths of their JSON (None for what could not run)."""
    import glob
    import subprocess
    os.makedirs(out_dir, exist_ok=True)
    torch_json = os.path.join(out_dir, "torch.json")
    ours_json = os.path.join(out_dir, "gpu-bench.json")
    if os.path.exists(".gpu/torch_baselines.py"):
        print("bench: running .gpu/torch_baselines.py", flush=True)
        if subprocess.run([sys.executable, ".gpu/torch_baselines.py", "--json", torch_json]).returncode != 0:
            print("bench: torch_baselines.py failed", flush=True)
    else:
        print("bench: no .gpu/torch_baselines.py (run scripts/gpu-pack.sh first): no PyTorch column", flush=True)
    bins = sorted(glob.glob(".gpu/bin/bench/gpu-*"))
    if bins:
        commit = open(".gpu/COMMIT").read().strip() if os.path.exists(".gpu/COMMIT") else "unknown"
        cmd = [bins[0], "--out", out_dir, "--commit", commit, "--date", time.strftime("%Y-%m-%d", time.gmtime()),
               "--iters", str(iters)]
        if os.path.exists(torch_json):
            cmd += ["--torch", torch_json]
        print(f"bench: running {' '.join(cmd)}", flush=True)
        if subprocess.run(cmd).returncode != 0:
            print("bench: our bench binary failed", flush=True)
    else:
        print("bench: no .gpu/bin/bench/gpu-* (run scripts/gpu-pack.sh first): no CUDA column", flush=True)
    return (ours_json if os.path.exists(ours_json) else None, torch_json if os.path.exists(torch_json) else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--only", help="regular expression on program or module names")
    ap.add_argument("--groups", help="comma-separated groups to run (bench, golden, coverage; default all)")
    ap.add_argument("--time", default="bench", help="comma-separated groups to time (bench, golden, coverage), or none")
    ap.add_argument("--iters", type=int, default=300, help="timed launches per module (default 300, as our bench)")
    ap.add_argument("--jobs", type=int, default=8, help="worker processes compiling the modules first (0: none)")
    ap.add_argument("--interpret", action="store_true", help="no GPU: Triton's interpreter on numpy arrays")
    ap.add_argument("--bench", metavar="OUT_DIR",
                    help="run .gpu's PyTorch anchors and our CUDA bench into OUT_DIR first, for the bench table")
    ap.add_argument("--bench-json", help="our CUDA results (gpu-bench.json) of the same run, for the bench table")
    ap.add_argument("--torch-json", help="torch_baselines.py's JSON of the same run, for the bench table")
    ap.add_argument("--json", help="write the results here (and the bench table beside it, triton-bench.md)")
    a = ap.parse_args()
    if a.iters < 1:
        sys.exit("--iters must be at least 1")

    root = a.dir
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "mirage-triton-check" or manifest.get("version") != 2:
        sys.exit(f"{root}/manifest.json: not a version-2 mirage-triton-check manifest (re-run scripts/triton-pack.sh)")
    timed = set() if a.time == "none" else set(a.time.split(","))
    be = NumpyBackend() if a.interpret else TorchBackend()
    work = list(selected(manifest, a.only, set(a.groups.split(",")) if a.groups else None))
    print(f"triton check: {sum(len(m) for _, m in work)} modules of {len(work)} programs on {be.name}"
          f" (manifest of commit {manifest.get('commit', '?')})", flush=True)

    bench_json, torch_json = a.bench_json, a.torch_json
    if a.bench and not a.interpret:
        bench_json, torch_json = run_bench(a.bench, a.iters)

    if a.jobs > 1 and not a.interpret:
        import concurrent.futures as cf
        import multiprocessing as mp
        t0 = time.time()
        with cf.ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
            failed = sum(len(e) for e in pool.map(warm_worker, [(root, p, m) for p, m in work]))
        print(f"compiled in {a.jobs} workers in {time.time() - t0:.0f} s ({failed} modules failed there)", flush=True)

    results = []
    for prog, mods in work:
        try:
            made = [be.make_input(s) for s in prog["inputs"]]
        except Exception as e:
            for m in mods:
                results.append(dict(program=prog["name"], group=prog["group"], module=m["name"], ok=False,
                                    error=f"inputs: {type(e).__name__}: {e}"))
            continue
        inputs = [t for t, _, _ in made]
        bad_inputs = []
        for spec, (_, checksum, first) in zip(prog["inputs"], made):
            if first != spec["first"][:len(first)] or abs(checksum - spec["checksum"]) > 1e-6 * max(1.0, abs(spec["checksum"])):
                bad_inputs.append(f"{spec['name']}: checksum {checksum!r} first {first} differ from the manifest's"
                                  f" {spec['checksum']!r} {spec['first']}")
        expected = [be.load_expected(os.path.join(root, o["file"]), o["shape"]) for o in prog["outputs"]]
        for m in mods:
            r = dict(program=prog["name"], group=prog["group"], module=m["name"], kernels=m["kernels"], ok=False)
            results.append(r)
            if bad_inputs:
                r["error"] = "input generator mismatch: " + "; ".join(bad_inputs)
                continue
            try:
                launch = load_module(os.path.join(root, m["file"]), m["name"]).launch
                got = as_tuple(launch(*inputs))
                be.sync()
                if len(got) != len(expected):
                    raise RuntimeError(f"{len(got)} outputs, expected {len(expected)}")
                checks = [be.compare(g, w, o["tolerance"]) for g, w, o in zip(got, expected, prog["outputs"])]
                r["rel_l2"] = max(c[0] for c in checks)
                r["outside"] = sum(c[1] for c in checks)
                r["ok"] = r["outside"] == 0 and all(
                    c[0] <= o["tolerance"]["rel_l2_bound"] for c, o in zip(checks, prog["outputs"]))
                if not r["ok"]:
                    r["error"] = "; ".join(
                        f"output {k}: rel L2 {c[0]:.2e} (bound {o['tolerance']['rel_l2_bound']:.2e}),"
                        f" {c[1]} elements outside atol {o['tolerance']['atol']:.2e} + rtol {o['tolerance']['rtol']:.2e}·|want|"
                        for k, (c, o) in enumerate(zip(checks, prog["outputs"])))
                if r["ok"] and prog["group"] in timed:
                    t = be.time_us(lambda: launch(*inputs), 25, a.iters)
                    if t:
                        r["us"], r["min_us"], r["max_us"], r["samples"] = t["median"], t["min"], t["max"], t["samples"]
            except Exception as e:
                lines = traceback.format_exception_only(type(e), e)
                r["error"] = " ".join(l.strip() for l in lines)[:2000]
            status = "ok  " if r["ok"] else "FAIL"
            err = f"{r['rel_l2']:.2e}" if "rel_l2" in r else "-"
            us = f"{r['us']:.1f} us" if r.get("us") else ""
            print(f"{status} {prog['group']:8} {m['name']:40} {m['kernels']} kernel(s)  rel L2 {err:9} {us}", flush=True)
            if "error" in r:
                print(f"     {r['error']}", flush=True)

    table = bench_table(results, bench_json, torch_json, manifest.get("commit"), a.iters)
    passed = sum(r["ok"] for r in results)
    failed = len(results) - passed
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(backend=be.name, commit=manifest.get("commit"), results=results), f, indent=1)
        if table:
            md = os.path.join(os.path.dirname(a.json) or ".", "triton-bench.md")
            with open(md, "w") as f:
                f.write(table)
            print(f"bench table written to {md}")
    for group in ("bench", "golden", "coverage"):
        g = [r for r in results if r["group"] == group]
        if g:
            worst = max((r.get("rel_l2", math.inf) for r in g), default=0.0)
            print(f"{group}: {sum(r['ok'] for r in g)}/{len(g)} modules match the reference, worst rel L2 {worst:.2e}")
    print(f"triton: {passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


def bench_table(results, bench_json, torch_json, commit, iters):
    """The Markdown table of the timed modules beside our CUDA kernels and PyTorch (printed and
    returned; None when nothing was timed)."""
    rows = [r for r in results if r.get("us")]
    if not rows:
        return None

    def load(path):
        if not path:
            return {}
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            print(f"(nothing read from {path}: {e})")
            return {}

    ours_doc, torch_doc = load(bench_json), load(torch_json)
    ours, torch_rows = ours_doc.get("rows", {}), torch_doc.get("rows", {})
    fmt = lambda v: f"{v:.1f}" if v else "-"
    lines = [
        f"# mirage→Triton beside mirage→CUDA and PyTorch",
        "",
        f"Triton modules of manifest commit {commit}; our CUDA kernels of commit {ours_doc.get('commit', '-')}"
        f" ({ours_doc.get('device', 'no bench JSON')}), the same GPU run. Medians of {iters} launches, CUDA"
        " events, L2 flushed before each (Triton: the module's `launch`, its output allocation included).",
        "",
        "| case | kernels | mirage→Triton µs | mirage→CUDA µs | best PyTorch µs (variant) | Triton / CUDA | PyTorch / Triton |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cuda = ours.get(r["program"], {}).get("ours_us")
        t = torch_rows.get(r["program"], {})
        variants = [(v, k) for k, v in t.items() if k in ("eager", "graph", "compile", "sdpa") and v]
        best = min(variants, default=None)
        best_txt = f"{best[0]:.1f} ({best[1]})" if best else "-"
        ratio = f"{r['us'] / cuda:.2f}" if cuda else "-"
        speed = f"{best[0] / r['us']:.2f}" if best else "-"
        lines.append(f"| {r['module']} | {r['kernels']} | {r['us']:.1f} | {fmt(cuda)} | {best_txt} | {ratio} | {speed} |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    return table


if __name__ == "__main__":
    main()
