#!/usr/bin/env python3
"""Runs the Triton modules mirage generated against the expected outputs of its CPU reference.

The folder (written by `cargo run --release -p mirage-rs-cli --example triton_pack -- DIR`) holds
`manifest.json`, one Python module per µGraph (`modules/*.py`, each with a `launch(...)` taking
torch tensors) and the reference's outputs as raw little-endian f32 (`expected/*.f32`). Inputs are
not stored: they are regenerated here from the seeds in the manifest with the same integer hash
the Rust side used, checked against its checksums, rounded to the element type, and laid out with
the program's strides.

For every program and every module: launch, compare each output with the reference (relative L2
error within the element type's tolerance; NaN or infinity fails), and time the modules of the
timed groups (`--time`, default `bench`) with triton.testing.do_bench (CUDA events, L2 flushed
before each call, median), the same timing as torch_baselines.py. With `--bench-json` (our CUDA
kernels, benches/gpu.rs's gpu-bench.json) and `--torch-json` (torch_baselines.py's JSON) of the
same run, the bench table puts the three side by side.

  python3 scripts/triton_check.py DIR [--groups G,..] [--only REGEX] [--time GROUPS|none] [--jobs N]
                                      [--bench-json F] [--torch-json F] [--json OUT]
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

def hash_values(xp, n, seed, rng):
    """The f32 values of a tensor of n elements: x = hash(i, seed), v = ((x >> 8) / 2^24 * 2 - 1) * rng."""
    if xp.__name__ == "torch":
        i = xp.arange(n, dtype=xp.int64, device="cuda")
    else:
        i = xp.arange(n, dtype=xp.int64)
    x = (i * 0x9E3779B1 + seed) & M32
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & M32
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & M32
    x = x ^ (x >> 16)
    if xp.__name__ == "torch":
        v = (x >> 8).to(xp.float32)
    else:
        v = (x >> 8).astype(xp.float32)
    return (v * (1.0 / 16777216.0) * 2.0 - 1.0) * rng


# ---------------------------------------------------------------------------------------------
# Back ends: torch on a CUDA device, or numpy under Triton's interpreter.

class TorchBackend:
    name = "cuda"

    def __init__(self):
        import torch
        self.torch = torch
        self.dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}

    def make_input(self, spec, rng):
        torch = self.torch
        n = math.prod(spec["shape"])
        v = hash_values(torch, n, spec["seed"], rng)
        checksum = float(v.double().sum())
        first = [float(x) for x in v[:4].cpu()]
        t = v.to(self.dtypes[spec["dtype"]]).reshape(spec["shape"])
        dev = torch.empty_strided(spec["shape"], spec["strides"], dtype=t.dtype, device="cuda")
        dev.copy_(t)
        return dev, checksum, first

    def load_expected(self, path, shape):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        return self.torch.frombuffer(data, dtype=self.torch.float32).reshape(shape).to("cuda")

    def rel_l2(self, got, want):
        g = got.double()
        if not bool(self.torch.isfinite(g).all()):
            return math.inf
        w = want.double()
        return float((g - w).norm() / max(float(w.norm()), 1e-30))

    def sync(self):
        self.torch.cuda.synchronize()

    def time_us(self, fn):
        from triton.testing import do_bench
        return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


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
        # to f32 first; pow becomes exp2(b·log2(a)), exact for the positive bases of the checks.
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
        self.torch = sys.modules["torch"]

    def make_input(self, spec, rng):
        np = self.np
        n = math.prod(spec["shape"])
        v = hash_values(np, n, spec["seed"], rng)
        checksum = float(v.astype(np.float64).sum())
        first = [float(x) for x in v[:4]]
        t = self.torch.empty_strided(spec["shape"], spec["strides"], dtype=self.torch.DTYPES[spec["dtype"]])
        t.set_logical(v.reshape(spec["shape"]))
        return t, checksum, first

    def load_expected(self, path, shape):
        return self.np.fromfile(path, dtype="<f4").reshape(shape)

    def rel_l2(self, got, want):
        np = self.np
        g = got.logical().astype(np.float64)
        if not np.isfinite(g).all():
            return math.inf
        w = want.astype(np.float64)
        return float(np.linalg.norm(g - w) / max(float(np.linalg.norm(w)), 1e-30))

    def sync(self):
        pass

    def time_us(self, fn):
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
    m.Tensor, m.float16, m.bfloat16, m.float32 = Tensor, f16, bf16, f32
    m.DTYPES = {"f16": f16, "bf16": bf16, "f32": f32}
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
    root, prog, mods, rng = args
    errors = []
    try:
        be = TorchBackend()
        inputs = [be.make_input(s, rng)[0] for s in prog["inputs"]]
        for m in mods:
            try:
                load_module(os.path.join(root, m["file"]), m["name"]).launch(*inputs)
                be.sync()
            except Exception as e:  # reported again, with details, by the main process
                errors.append(f"{m['name']}: {type(e).__name__}")
    except Exception as e:
        errors.append(f"{prog['name']}: {type(e).__name__}: {e}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--only", help="regular expression on program or module names")
    ap.add_argument("--groups", help="comma-separated groups to run (bench, golden, coverage; default all)")
    ap.add_argument("--time", default="bench", help="comma-separated groups to time (bench, golden, coverage), or none")
    ap.add_argument("--jobs", type=int, default=8, help="worker processes compiling the modules first (0: none)")
    ap.add_argument("--interpret", action="store_true", help="no GPU: Triton's interpreter on numpy arrays")
    ap.add_argument("--bench-json", help="our CUDA results (gpu-bench.json) of the same run, for the bench table")
    ap.add_argument("--torch-json", help="torch_baselines.py's JSON of the same run, for the bench table")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    root = a.dir
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "mirage-triton-check" or manifest.get("version") != 1:
        sys.exit(f"{root}/manifest.json: not a version-1 mirage-triton-check manifest")
    rng = manifest["input_range"]
    timed = set() if a.time == "none" else set(a.time.split(","))
    be = NumpyBackend() if a.interpret else TorchBackend()
    work = list(selected(manifest, a.only, set(a.groups.split(",")) if a.groups else None))
    print(f"triton check: {sum(len(m) for _, m in work)} modules of {len(work)} programs on {be.name}"
          f" (manifest of commit {manifest.get('commit', '?')})", flush=True)

    if a.jobs > 1 and not a.interpret:
        import concurrent.futures as cf
        import multiprocessing as mp
        t0 = time.time()
        with cf.ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
            failed = sum(len(e) for e in pool.map(warm_worker, [(root, p, m, rng) for p, m in work]))
        print(f"compiled in {a.jobs} workers in {time.time() - t0:.0f} s ({failed} modules failed there)", flush=True)

    results = []
    for prog, mods in work:
        try:
            made = [be.make_input(s, rng) for s in prog["inputs"]]
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
            r = dict(program=prog["name"], group=prog["group"], module=m["name"], kernels=m["kernels"],
                     tolerance=prog["tolerance"], ok=False)
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
                errs = [be.rel_l2(g, w) for g, w in zip(got, expected)]
                r["rel_l2"] = max(errs)
                r["ok"] = r["rel_l2"] <= prog["tolerance"]
                if r["ok"] and prog["group"] in timed:
                    r["us"] = be.time_us(lambda: launch(*inputs))
            except Exception as e:
                lines = traceback.format_exception_only(type(e), e)
                r["error"] = " ".join(l.strip() for l in lines)[:2000]
            status = "ok  " if r["ok"] else "FAIL"
            err = f"{r['rel_l2']:.2e}" if "rel_l2" in r else "-"
            us = f"{r['us']:.1f} us" if r.get("us") else ""
            print(f"{status} {prog['group']:8} {m['name']:40} {m['kernels']} kernel(s)  rel L2 {err:9} {us}", flush=True)
            if "error" in r:
                print(f"     {r['error']}", flush=True)

    bench_table(results, a.bench_json, a.torch_json)
    passed = sum(r["ok"] for r in results)
    failed = len(results) - passed
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(backend=be.name, commit=manifest.get("commit"), results=results), f, indent=1)
    for group in ("bench", "golden", "coverage"):
        g = [r for r in results if r["group"] == group]
        if g:
            worst = max((r.get("rel_l2", math.inf) for r in g), default=0.0)
            print(f"{group}: {sum(r['ok'] for r in g)}/{len(g)} modules match the reference, worst rel L2 {worst:.2e}")
    print(f"triton: {passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


def bench_table(results, bench_json, torch_json):
    rows = [r for r in results if r.get("us")]
    if not rows:
        return
    def rows_of(path):
        if not path:
            return {}
        try:
            with open(path) as f:
                return json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(f"(no rows from {path}: {e})")
            return {}

    ours, torch_rows = rows_of(bench_json), rows_of(torch_json)
    print("\n| case | kernels | Triton (ours) µs | CUDA (ours) µs | best PyTorch µs | Triton / CUDA |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cuda = ours.get(r["program"], {}).get("ours_us")
        t = torch_rows.get(r["program"], {})
        best = min((v for k, v in t.items() if k in ("eager", "graph", "compile", "sdpa") and v), default=None)
        fmt = lambda v: f"{v:.1f}" if v else "-"
        ratio = f"{r['us'] / cuda:.2f}x" if cuda else "-"
        print(f"| {r['module']} | {r['kernels']} | {r['us']:.1f} | {fmt(cuda)} | {fmt(best)} | {ratio} |")
    print()


if __name__ == "__main__":
    main()
