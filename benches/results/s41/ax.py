# Session 41 experiment: phase timestamps inside decode_attention (layer 14, steps 40 and 41),
# printed by the merging task. Hand edit of generated megakernel source, measurement only.
import re, sys
src, dst, layer = sys.argv[1], sys.argv[2], sys.argv[3]
t = open(src).read()
def sub(old, new, count=1):
    global t
    assert t.count(old) >= 1, old
    t = t.replace(old, new, count)
# attention_chunk: optional stamp pointer
sub("float* smem, float* out) {\n  constexpr int WARPS = THREADS / 32;\n  constexpr int VEC",
    "float* smem, float* out, unsigned long long* st = nullptr) {\n  constexpr int WARPS = THREADS / 32;\n  constexpr int VEC")
# stamps inside attention_chunk (first occurrence of each sync in its body)
i0 = t.index("unsigned long long* st = nullptr) {")
i1 = t.index("template <int THREADS, int D, int G> __device__ __forceinline__ void attention_neutral")
body = t[i0:i1]
body = body.replace("      for (int g = 0; g < G; ++g) sc[g * THREADS + tid] = s[g] * scale;\n    }\n    __syncthreads();\n",
                    "      for (int g = 0; g < G; ++g) sc[g * THREADS + tid] = s[g] * scale;\n    }\n    __syncthreads();\n    if (st && tid == 0 && t0 == lo) st[4] = globaltimer();\n", 1)
body = body.replace("        mrun[g] = mnew;\n      }\n    }\n    __syncthreads();\n",
                    "        mrun[g] = mnew;\n      }\n    }\n    __syncthreads();\n    if (st && tid == 0 && t0 == lo) st[5] = globaltimer();\n", 1)
body = body.replace("  // Sum the key lanes of a warp", "  if (st && tid == 0) st[6] = globaltimer();\n  // Sum the key lanes of a warp", 1)
body = body.replace("  __syncthreads();\n  for (int e = tid; e < G * D; e += THREADS) {\n    const int g = e / D, i = e % D;\n    float o = 0.0f;",
                    "  __syncthreads();\n  if (st && tid == 0) st[7] = globaltimer();\n  for (int e = tid; e < G * D; e += THREADS) {\n    const int g = e / D, i = e % D;\n    float o = 0.0f;", 1)
body = body.replace("  (void)KL;\n}", "  if (st && tid == 0) st[8] = globaltimer();\n  (void)KL;\n}", 1)
assert body.count("st[") == 5, body.count("st[")
t = t[:i0] + body + t[i1:]
# decode_attention
sub("float scale, unsigned source, float* smem) {\n  constexpr int WARPS = THREADS / 32;\n  constexpr int H = D / 2;",
    "float scale, unsigned source, float* smem, int dbg = 0) {\n  constexpr int WARPS = THREADS / 32;\n  constexpr int H = D / 2;\n"
    "  unsigned long long* st = (dbg && (c.step == 40 || c.step == 41)) ? mpk_dbg + (((c.step & 1) * 64 + kvh) * 64 + chunk) * 12 : nullptr;\n"
    "  if (st && threadIdx.x == 0) { st[0] = globaltimer(); st[11] = 0; }")
i0 = t.index("int dbg = 0) {")
i1 = t.index("// Split-KV attention, second half")
body = t[i0:i1]
def bsub(old, new):
    global body
    assert body.count(old) >= 1, old
    body = body.replace(old, new, 1)
bsub("    sn[i] = (float)s;\n  }\n  __syncthreads();\n", "    sn[i] = (float)s;\n  }\n  __syncthreads();\n  if (st && tid == 0) st[1] = globaltimer();\n")
bsub("      if (lane == 0) hs[g] = (float)(1.0 / sqrt((double)ss / D + (double)eps));\n    }\n    __syncthreads();\n",
     "      if (lane == 0) hs[g] = (float)(1.0 / sqrt((double)ss / D + (double)eps));\n    }\n    __syncthreads();\n    if (st && tid == 0) st[2] = globaltimer();\n")
bsub("  float* mine = part + (size_t)chunk * G * (D + 2);\n", "  float* mine = part + (size_t)chunk * G * (D + 2);\n  if (st && tid == 0) st[3] = globaltimer();\n")
bsub("lo, hi, scale, smem, mine);", "lo, hi, scale, smem, mine, st);")
bsub("  __threadfence();\n  __syncthreads();\n  unsigned last = 0;", "  __threadfence();\n  __syncthreads();\n  if (st && tid == 0) st[9] = globaltimer();\n  unsigned last = 0;")
bsub("  if (__syncthreads_or(last) == 0) return;\n", "  const int lastb = __syncthreads_or(last);\n  if (st && tid == 0) st[10] = globaltimer();\n  if (lastb == 0) return;\n")
bsub("(part, out + (size_t)kvh * G * D, smem);\n}", "(part, out + (size_t)kvh * G * D, smem);\n"
     "  if (st && tid == 0) {\n    st[11] = globaltimer();\n    __threadfence();\n"
     "    const unsigned long long* b = st - chunk * 12;\n    unsigned long long m = b[0];\n"
     "    for (int q = 1; q < CHUNKS; ++q) m = b[q * 12] < m ? b[q * 12] : m;\n"
     "    for (int q = 0; q < CHUNKS; ++q) { const unsigned long long* s = b + q * 12;\n"
     "      printf(\"ATT step %u kvh %d chunk %2d start %6lld | %5lld %5lld %5lld %5lld %5lld %5lld %5lld %5lld %5lld %5lld %5lld\\n\", c.step, kvh, q, (long long)(s[0] - m),"
     " (long long)(s[1]-s[0]), (long long)(s[2]-s[0]), (long long)(s[3]-s[0]), (long long)(s[4]-s[0]), (long long)(s[5]-s[0]), (long long)(s[6]-s[0]), (long long)(s[7]-s[0]), (long long)(s[8]-s[0]), (long long)(s[9]-s[0]), (long long)(s[10]-s[0]), s[11] ? (long long)(s[11]-s[0]) : -1ll); }\n  }\n}")
t = t[:i0] + body + t[i1:]
# the debug array, before namespace mpk's first use
sub("namespace mpk {\n", "namespace mpk {\n__device__ unsigned long long mpk_dbg[2 * 64 * 64 * 12];\n")
n = len(re.findall(r"reinterpret_cast<float\*>\(smem\)\); break;  // l%s\.attention\n" % layer, t))
assert n == 1, n
t = re.sub(r"reinterpret_cast<float\*>\(smem\)\); break;  // l%s\.attention\n" % layer, "reinterpret_cast<float*>(smem), 1); break;  // l%s.attention\n" % layer, t)
open(dst, "w").write(t)
