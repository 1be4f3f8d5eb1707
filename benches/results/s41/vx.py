# Session 41 experiments on decode_attention (hand edits of generated megakernel source, for
# measurement only). F: the ticket as a grid barrier does it (block barrier, then thread 0's
# fence, atomic, fence) without a fence in every thread. S: the angles by float sincosf (not
# exact: an upper bound of what precomputed angles could save).
import sys
src, dst, variants = sys.argv[1], sys.argv[2], sys.argv[3]
t = open(src).read()
i0 = t.index("__device__ __noinline__ void decode_attention(")
i1 = t.index("// Split-KV attention, second half")
b = t[i0:i1]
if "F" in variants:
    old = "  __threadfence();\n  __syncthreads();\n  unsigned last = 0;\n  if (tid == 0) {\n    const unsigned old = atomicAdd(tickets + kvh, 1u);"
    assert old in b
    b = b.replace(old, "  __syncthreads();\n  unsigned last = 0;\n  if (tid == 0) {\n    __threadfence();\n    const unsigned old = atomicAdd(tickets + kvh, 1u);")
if "S" in variants:
    old = "    double s, co;\n    sincos((double)pos * (double)load(inv_freq + i), &s, &co);"
    assert old in b
    b = b.replace(old, "    float s, co;\n    sincosf((float)pos * load(inv_freq + i), &s, &co);")
t = t[:i0] + b + t[i1:]
open(dst, "w").write(t)
