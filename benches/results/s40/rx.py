# Session 40 experiment: the norm-folded projections' loop without the per-iteration warp-0
# sum of squares (R1: squares summed by the element-wise pass's threads in registers, reduced
# after the loop; R2: also no staged x*g tile: the matmul reads t0*t1 itself). Hand edit of
# generated megakernel source, for measurement only.
import re, sys
src, dst, variant = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
parts = re.split(r'(?=// task body of `)', text)
out = []
for p in parts:
    m = re.match(r'// task body of `l0\.(qkv\.k0|mlp\.k0)`', p)
    if not m:
        out.append(p); continue
    red = re.search(r'    if \(warp < 1\) \{ const int o = warp;\n.*?\n      if \(lane == 0\) \{ t2\[o\] = \(it == 0 \? 0\.0f : t2\[o\]\) \+ v; \}\n    \}\n    __syncthreads\(\);\n', p, re.S)
    assert red, m.group(1)
    ew = re.search(r'(    (?:\{|if \(tid < (\d+)\) \{) const int e = tid;\n      t3\[\(\(e % (\d+)\)\)\] = mirage::from_f32<__nv_bfloat16>\(\(mirage::to_f32\(t0\[\(\(e % \d+\)\)\]\) \* mirage::to_f32\(t1\[\(\(e % \d+\)\)\]\)\)\);\n    \}\n    __syncthreads\(\);\n)', p)
    assert ew and ew.start() == red.end(), m.group(1)
    k = int(ew.group(3))
    tpr = int(re.search(r'on CUDA cores: (\d+) thread\(s\) per B row', p).group(1))
    if variant == 'R1':
        guard = ew.group(1).split('\n')[0]
        new = (guard + '\n      const float xv = mirage::to_f32(t0[((e %% %d))]);\n' % k +
               '      ssq += xv * xv;\n'
               '      t3[((e %% %d))] = mirage::from_f32<__nv_bfloat16>(xv * mirage::to_f32(t1[((e %% %d))]));\n' % (k, k) +
               '    }\n    __syncthreads();\n')
        p = p[:red.start()] + new + p[ew.end():]
    else:  # R2
        p = p[:red.start()] + p[ew.end():]
        n = p.count('mirage::to_f32(t3[(r)])')
        assert n in (1, 2), n
        p = p.replace('mirage::to_f32(t3[(r)])', 'xg')
        # each matmul: after `const int r = ...;` compute xg, and sum squares once per row.
        first = [True]
        def addxg(mm):
            s = mm.group(0) + '\n' + mm.group(1) + 'const float xr = mirage::to_f32(t0[(r)]);\n' + mm.group(1) + \
                'const float xg = mirage::to_f32(mirage::from_f32<__nv_bfloat16>(xr * mirage::to_f32(t1[(r)])));\n'
            if first[0]:
                s += mm.group(1) + 'if (tid %% %d == 0) ssq += xr * xr;\n' % tpr
                first[0] = False
            return s
        p = re.sub(r'( +)const int r = tid / \d+ \+ q_r \* \d+;', addxg, p)
    # declare the accumulator before the loop, reduce after it, use it for the norm.
    p = p.replace('  for (int it = 0;', '  float ssq = 0.0f;\n  for (int it = 0;', 1)
    p = p.replace('  // after the loop\n  __syncthreads();\n',
                  '  // after the loop\n  { const float s = mirage::warp_sum(ssq); if (lane == 0) t2[1 + warp] = s; }\n  __syncthreads();\n', 1)
    sq = re.search(r't2\[e\] = sqrtf\(t2\[e\] / (\d+)\.0f\);', p)
    assert sq
    p = p[:sq.start()] + 't2[e] = sqrtf((t2[1] + t2[2] + t2[3] + t2[4] + t2[5] + t2[6] + t2[7] + t2[8]) / %s.0f);' % sq.group(1) + p[sq.end():]
    out.append(p)
open(dst, 'w').write(''.join(out))
