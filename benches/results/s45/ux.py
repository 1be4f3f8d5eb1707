# Session 45 experiment U (hand edit of a generated megakernel source, for measurement only):
# decode_attention ends after its chunk's partial: no fence, ticket or merge (the output `out`
# is never written, so the step computes garbage; its time is an upper bound of what a merge
# elsewhere could save on the attention's side; DECISIONS change 100).
import sys
src, dst = sys.argv[1], sys.argv[2]
t = open(src).read()
i0 = t.index("__device__ __noinline__ void decode_attention(")
i1 = t.index("// Split-KV attention, second half")
b = t[i0:i1]
old = "  // Every thread's partial writes reach the device before the ticket is taken.\n  __threadfence();"
assert old in b
b = b.replace(old, "  return;\n" + old)
t = t[:i0] + b + t[i1:]
open(dst, "w").write(t)
