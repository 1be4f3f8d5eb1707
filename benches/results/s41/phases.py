# Summarize the ATT lines of decodeA (ax.py's stamps): per step, the spread of chunk starts and
# the mean/max of each phase's end (ns from the task's own start).
import sys, re, statistics as st
names = ["loads+angles", "norm", "rot", "scores", "softmax", "pv", "red", "chunk end", "fence", "ticket", "merge"]
for f in sys.argv[1:]:
    rows = {}
    for l in open(f):
        m = re.match(r"ATT step (\d+) kvh (\d+) chunk +(\d+) start +(-?\d+) \| (.*)", l)
        if not m: continue
        rows.setdefault(int(m.group(1)), []).append((int(m.group(2)), int(m.group(3)), int(m.group(4)), [int(x) for x in m.group(5).split()]))
    for step, rs in sorted(rows.items()):
        starts = [r[2] for r in rs]
        print(f"{f} step {step}: {len(rs)} tasks; start spread per kvh (ns from its first): mean {st.mean(starts):.0f} max {max(starts)}")
        for i, n in enumerate(names):
            v = [r[3][i] for r in rs if r[3][i] >= 0 and r[3][i] < 10**7]
            if v: print(f"  {n:12s} mean {st.mean(v):7.0f}  max {max(v):7.0f}")
        ends = {}
        for kvh, ch, s, p in rs:
            e = s + (p[10] if p[10] >= 0 else p[9])
            ends.setdefault(kvh, []).append(e)
        print("  per kvh: last ticket at (ns from first start):", [max(v) for k, v in sorted(ends.items())])
