//! Matmuls: the FMA fallback, tensor-core `mma.sync` m16n8k16 tiles dealt to warps, row-owned
//! bands with operands and results in registers, and the fragments they load and store.

use crate::ir::UnaryOp;

use super::super::planner::{ASource, FmaMatmul, RowBands, RowMatmul, RowOut, Tile, TiledMatmul, VectorMatmul, ctype};
use super::expr::{two, unary_expr, unary_name};
use super::{Emitter, preloaded_a, register_accumulator, register_value};

/// (row, column) of the four 32-bit registers of an m16n8k16 A fragment, relative to lane row
/// `r0 = mt*16 + lane/4` and column `c0 = kt*16 + (lane%4)*2`.
const A_FRAGMENT: [(&str, &str); 4] = [("r0", "c0"), ("r0+8", "c0"), ("r0", "c0+8"), ("r0+8", "c0+8")];

impl Emitter<'_> {
    /// f32 matmul `a[m,k] x b[k,n]` into tile `c`: one output element per thread.
    pub(super) fn matmul_fma(&mut self, indent: usize, p: &FmaMatmul, a: &Tile, b: &Tile, c: &Tile) {
        let FmaMatmul { m, k, n } = *p;
        let r = a.shape.len();
        let body = format!(
            "const int i = e / {n}, j = e % {n};\nfloat s = 0.0f;\nfor (int q = 0; q < {k}; ++q) s += {} * {};\n{}[{}] = s;",
            a.load(&two("i", "q", r)),
            b.load(&two("q", "j", r)),
            c.var,
            c.offset_expr(&two("i", "j", r))
        );
        self.elementwise(indent, m * n, &body);
    }

    /// Tensor-core matmul `a[m,k] x b[k,n]`, its mma tiles dealt to the warps. With `acc` (a
    /// register array declared before the loop), accumulates into it; else writes the f32 tile
    /// `c`.
    pub(super) fn matmul_tiled(&mut self, indent: usize, p: &TiledMatmul, a: &Tile, b: &Tile, out: TiledOut) {
        let TiledMatmul { m, k, n, dtype, tiles, nt, kt, split, chains, per_warp, b_ldmatrix, .. } = *p;
        let ty = ctype(dtype);
        let warps = self.plan.warps;
        if p.k_strided {
            let TiledOut::Accumulator(i) = out else {
                unreachable!("only register-accumulated matmuls deal their k-steps to the warps")
            };
            self.matmul_k_strided(indent, p, i, a, b);
            return;
        }
        let kt_range = kt / split;
        let split_note = if split > 1 { format!(", k-steps split {split} ways over the warps") } else { String::new() };
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}]: {tiles} mma tiles of 16x8, {kt} k-steps in {chains} chain(s){}{split_note}", if b_ldmatrix { ", B by ldmatrix.trans" } else { "" }));
        self.line(indent, "{");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int j = 0; j < {per_warp}; ++j) {{"));
        if split > 1 {
            self.line(
                indent + 2,
                &format!("const int q = warp + j * {warps}, t = q % {tiles}, k0 = (q / {tiles}) * {kt_range};"),
            );
        } else {
            self.line(indent + 2, &format!("const int t = warp + j * {warps}, k0 = 0;"));
        }
        self.line(indent + 2, &format!("if (t < {tiles}) {{"));
        self.line(indent + 3, &format!("const int mt = t / {nt}, nt = t % {nt};"));
        match out {
            TiledOut::Accumulator(i) => self.line(indent + 3, &format!("float* d = {}[j];", register_accumulator(i))),
            TiledOut::Smem(_) => self.line(indent + 3, "float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};"),
        }
        self.line(indent + 3, &format!("float dc[{chains}][4];"));
        self.line(indent + 3, "#pragma unroll");
        self.line(
            indent + 3,
            &format!("for (int c = 0; c < {chains}; ++c) {{ dc[c][0] = dc[c][1] = dc[c][2] = dc[c][3] = 0.0f; }}"),
        );
        self.line(indent + 3, &format!("for (int kb = 0; kb < {kt_range}; kb += {chains}) {{"));
        self.line(indent + 4, "#pragma unroll");
        self.line(indent + 4, &format!("for (int c = 0; c < {chains}; ++c) {{"));
        self.line(indent + 5, "const int kt = k0 + kb + c;");
        if kt_range % chains != 0 {
            self.line(indent + 5, &format!("if (kb + c >= {kt_range}) break;"));
        }
        self.line(indent + 5, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
        self.line(indent + 5, "const int nb = nt * 8 + (lane >> 2);");
        self.line(indent + 5, "uint32_t fa[4], fb[2];");
        self.a_fragment(indent + 5, "fa", a, ty, (m, k));
        self.b_fragment(indent + 5, b, ty, b_ldmatrix, false);
        self.line(indent + 5, &format!("mirage::mma_16816<{ty}>(dc[c], fa, fb);"));
        self.line(indent + 4, "}");
        self.line(indent + 3, "}");
        self.line(indent + 3, "#pragma unroll");
        self.line(indent + 3, &format!("for (int c = 0; c < {chains}; ++c) {{ d[0] += dc[c][0]; d[1] += dc[c][1]; d[2] += dc[c][2]; d[3] += dc[c][3]; }}"));
        if let TiledOut::Smem(c) = out {
            self.store_fragment(indent + 3, c, m, n, "=");
        }
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Register-accumulated tensor-core matmul `a[m,k] x b[k,n]` of node `i` with its k-steps dealt
    /// to the warps ([`TiledMatmul::k_strided`]): warp `w` runs k-steps `w, w + warps, …`; per
    /// k-step it loads each 16-row band's A fragment once and runs every tile of the band on it,
    /// each tile into its own accumulator fragment (independent chains: no `dc` staging).
    fn matmul_k_strided(&mut self, indent: usize, p: &TiledMatmul, i: usize, a: &Tile, b: &Tile) {
        let TiledMatmul { m, k, n, dtype, tiles, nt, kt, b_ldmatrix, .. } = *p;
        let ty = ctype(dtype);
        let warps = self.plan.warps;
        let mt = tiles / nt;
        let acc = register_accumulator(i);
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}]: {tiles} mma tiles of 16x8, {kt} k-steps dealt to the {warps} warps (warp w: k-steps w, w + {warps}, ...), every tile per k-step{}", if b_ldmatrix { ", B by ldmatrix.trans" } else { "" }));
        self.line(indent, "{");
        self.line(indent + 1, &format!("for (int kt = warp; kt < {kt}; kt += {warps}) {{"));
        self.line(indent + 2, "#pragma unroll");
        self.line(indent + 2, &format!("for (int mt = 0; mt < {mt}; ++mt) {{"));
        self.line(indent + 3, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
        self.line(indent + 3, "uint32_t fa[4];");
        self.a_fragment(indent + 3, "fa", a, ty, (m, k));
        self.line(indent + 3, "#pragma unroll");
        self.line(indent + 3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(indent + 4, "uint32_t fb[2];");
        self.b_fragment(indent + 4, b, ty, b_ldmatrix, true);
        self.line(indent + 4, &format!("mirage::mma_16816<{ty}>({acc}[mt * {nt} + nt], fa, fb);"));
        self.line(indent + 3, "}");
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// CUDA-core matmul `a[m,k] x b[k,n]` of node `i` into its register accumulator
    /// ([`VectorMatmul`]): each thread's 16-byte vectors of B rows times the rows' A elements.
    pub(super) fn matmul_vector(&mut self, indent: usize, i: usize, p: &VectorMatmul, a: &Tile, b: &Tile) {
        let VectorMatmul { m, k, n, dtype, lanes, groups } = *p;
        let ty = ctype(dtype);
        let acc = register_accumulator(i);
        let r = b.shape.len();
        let sb0 = b.strides[r - 2];
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}] on CUDA cores: {lanes} thread(s) per B row (8 columns each), {groups} row group(s)"));
        self.line(indent, "{");
        self.line(indent + 1, &format!("const int vc = (tid % {lanes}) * 8;"));
        // Lanes past the row's n / 8 vectors (n / 8 not a power of two) idle.
        let idle = n / 8 < lanes;
        if idle {
            self.line(indent + 1, &format!("if (vc < {n}) {{"));
        }
        let open = indent + 1 + usize::from(idle);
        let close = self.open_strided(open, "r", &format!("tid / {lanes}"), k, groups);
        let inner = open + close;
        self.line(inner, &format!("const uint4 bv = *reinterpret_cast<const uint4*>(&{}[r*{sb0} + vc]);", b.var));
        let ra = a.shape.len();
        for mi in 0..m {
            let av = a.load(&two(&mi.to_string(), "r", ra));
            self.line(inner, &format!("mirage::fma8<{ty}>({acc}[{}], {acc}[{}], bv, {av});", 2 * mi, 2 * mi + 1));
        }
        self.close(open, close);
        if idle {
            self.line(indent + 1, "}");
        }
        self.line(indent, "}");
    }

    /// Loads B fragment `fb` of k-step `kt` and column tile `nt` of `b` (`[k, n]`): by
    /// `ldmatrix.trans`, or as two register pairs (with `declare_c0`, declaring `c0` and `nb`
    /// first).
    fn b_fragment(&mut self, indent: usize, b: &Tile, ty: &str, ldmatrix: bool, declare_c0: bool) {
        let r = b.shape.len();
        let (k, n) = (b.shape[r - 2], b.shape[r - 1]);
        if ldmatrix {
            let sb0 = b.strides[r - 2];
            if k.is_multiple_of(16) {
                self.line(
                    indent,
                    &format!("mirage::ldmatrix_x2_trans(fb, &{}[(kt * 16 + (lane & 15))*{sb0} + nt * 8]);", b.var),
                );
                return;
            }
            // A last k-step past k: its rows read row k-1 (in the tile), their registers zeroed.
            self.line(indent, &format!("{{ const int kr = kt * 16 + (lane & 15); mirage::ldmatrix_x2_trans(fb, &{}[(kr < {k} ? kr : {})*{sb0} + nt * 8]); }}", b.var, k - 1));
            self.line(indent, &format!("{{ const int ck = kt * 16 + (lane & 3) * 2; if (ck >= {k}) fb[0] = 0u; if (ck + 8 >= {k}) fb[1] = 0u; }}"));
            return;
        }
        if declare_c0 {
            self.line(indent, "const int c0 = kt * 16 + (lane & 3) * 2, nb = nt * 8 + (lane >> 2);");
        }
        self.line(indent, &format!("fb[0] = {};", b_pair_expr(b, ty, k, n, "c0", "nb")));
        self.line(indent, &format!("fb[1] = {};", b_pair_expr(b, ty, k, n, "c0+8", "nb")));
    }

    /// Row-owned matmul `i` (`[m, k] x [k, n]`, whole 16-row bands per warp): each k-step loads
    /// one A fragment and runs the band's `n / 8` mma tiles on it: that many independent
    /// accumulators.
    pub(super) fn matmul_rows(&mut self, indent: usize, i: usize, p: &RowMatmul) {
        let b = self.tile(self.bg().nodes()[i].inputs[1]);
        let r = b.shape.len();
        let (k, n) = (b.shape[r - 2], b.shape[r - 1]);
        let RowBands { mt, per_warp, nt, kt } = p.bands;
        let m = mt * 16;
        let ty = ctype(p.dtype);
        let src = match p.a {
            ASource::Smem(_) => "A from shared memory",
            ASource::Preloaded => "A preloaded in registers",
            ASource::Registers(_) => "A from registers",
        };
        let dst = match p.out {
            RowOut::Registers => "result in registers",
            RowOut::Accumulator => "accumulated in registers",
            RowOut::Smem => "result to shared memory",
        };
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}]: {mt} bands of 16 rows, {per_warp} per warp, {nt} mma tiles of 16x8 per band, {kt} k-steps; {src}, {dst}{}", if p.b_ldmatrix { ", B by ldmatrix.trans" } else { "" }));
        if p.out == RowOut::Registers {
            self.line(indent, &format!("float {}[{per_warp}][{nt}][4];", register_value(i)));
        }
        self.line(indent, "{");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 2, &format!("const int mt = warp + mi * {};", self.plan.warps));
        // The target of tile `nt` of band `mi`.
        let target = match p.out {
            RowOut::Registers => format!("{}[mi][nt]", register_value(i)),
            RowOut::Accumulator => format!("{}[mi * {nt} + nt]", register_accumulator(i)),
            RowOut::Smem => "dl[nt]".to_string(),
        };
        match p.out {
            RowOut::Registers => {
                self.line(indent + 2, "#pragma unroll");
                self.line(indent + 2, &format!("for (int nt = 0; nt < {nt}; ++nt) {{ {target}[0] = {target}[1] = {target}[2] = {target}[3] = 0.0f; }}"));
            }
            RowOut::Smem => {
                self.line(indent + 2, &format!("float dl[{nt}][4];"));
                self.line(indent + 2, "#pragma unroll");
                self.line(
                    indent + 2,
                    &format!(
                        "for (int nt = 0; nt < {nt}; ++nt) {{ dl[nt][0] = dl[nt][1] = dl[nt][2] = dl[nt][3] = 0.0f; }}"
                    ),
                );
            }
            RowOut::Accumulator => {}
        }
        self.line(indent + 2, &format!("if (mt < {mt}) {{"));
        self.line(indent + 3, "#pragma unroll");
        self.line(indent + 3, &format!("for (int kt = 0; kt < {kt}; ++kt) {{"));
        self.line(indent + 4, "uint32_t fa[4];");
        self.row_a_fragment(indent + 4, i, p, (m, k));
        self.line(indent + 4, "#pragma unroll");
        self.line(indent + 4, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(indent + 5, "uint32_t fb[2];");
        self.b_fragment(indent + 5, b, ty, p.b_ldmatrix, true);
        self.line(indent + 5, &format!("mirage::mma_16816<{ty}>({target}, fa, fb);"));
        self.line(indent + 4, "}");
        self.line(indent + 3, "}");
        if p.out == RowOut::Smem {
            let c = self.plan.out_tile(i);
            self.line(indent + 3, "#pragma unroll");
            self.line(indent + 3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
            self.line(indent + 4, "const float* d = dl[nt];");
            self.store_fragment(indent + 4, c, m, n, "=");
            self.line(indent + 3, "}");
        }
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Loads A fragment `fa` of k-step `kt` of band `mi` of row-owned matmul `i` (`[m, k]`).
    fn row_a_fragment(&mut self, indent: usize, i: usize, p: &RowMatmul, (m, k): (usize, usize)) {
        let ty = ctype(p.dtype);
        match p.a {
            ASource::Smem(t) => {
                let a = self.tile(t);
                self.line(indent, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
                self.a_fragment(indent, "fa", a, ty, (m, k));
            }
            ASource::Preloaded => {
                let name = preloaded_a(i);
                self.line(indent, &format!("fa[0] = {name}[mi][kt][0]; fa[1] = {name}[mi][kt][1]; fa[2] = {name}[mi][kt][2]; fa[3] = {name}[mi][kt][3];"));
            }
            ASource::Registers(x) => {
                // Accumulator fragments of tiles 2kt and 2kt+1 = the A fragment of k-step kt.
                let name = register_value(x);
                for (q, (tile, lo)) in
                    [("2 * kt", 0), ("2 * kt", 2), ("2 * kt + 1", 0), ("2 * kt + 1", 2)].iter().enumerate()
                {
                    self.line(
                        indent,
                        &format!(
                            "fa[{q}] = mirage::pack2<{ty}>({name}[mi][{tile}][{lo}], {name}[mi][{tile}][{}]);",
                            lo + 1
                        ),
                    );
                }
            }
        }
    }

    /// Loads the A fragments of row-owned matmul `i` into `pa{i}[per_warp][kt][4]` (before the
    /// loop: its A operand is loop-invariant).
    pub(super) fn preload_a(&mut self, indent: usize, i: usize, p: &RowMatmul) {
        let a = self.tile(self.bg().nodes()[i].inputs[0]);
        let name = preloaded_a(i);
        let r = a.shape.len();
        let (m, k) = (a.shape[r - 2], a.shape[r - 1]);
        let ty = ctype(p.dtype);
        let RowBands { per_warp, kt, mt, .. } = p.bands;
        self.line(
            indent,
            &format!("// A fragments of a loop-invariant operand, loaded once: {per_warp} band(s) x {kt} k-steps"),
        );
        self.line(indent, &format!("uint32_t {name}[{per_warp}][{kt}][4];"));
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int kt = 0; kt < {kt}; ++kt) {{"));
        self.line(indent + 2, &format!("const int mt = warp + mi * {};", self.plan.warps));
        self.line(indent + 2, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
        self.line(
            indent + 2,
            &format!("{name}[mi][kt][0] = {name}[mi][kt][1] = {name}[mi][kt][2] = {name}[mi][kt][3] = 0u;"),
        );
        self.line(indent + 2, &format!("if (mt < {mt}) {{"));
        self.a_fragment(indent + 3, &format!("{name}[mi][kt]"), a, ty, (m, k));
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// The four registers `target[0..4]` of the m16n8k16 A fragment at lane row `r0` and column
    /// `c0` (declared by the caller) of tile `a` (`[m, k]`) in the mma type `ty`.
    fn a_fragment(&mut self, indent: usize, target: &str, a: &Tile, ty: &str, (m, k): (usize, usize)) {
        for (q, (row, col)) in A_FRAGMENT.iter().enumerate() {
            self.line(indent, &format!("{target}[{q}] = {};", a_pair_expr(a, ty, m, k, row, col)));
        }
    }

    /// Register value `out = f(x)` of node `out_node` on the fragments of register value `x`
    /// (`[per_warp][nt][4]`).
    pub(super) fn unary_regs(&mut self, indent: usize, op: &UnaryOp, bands: RowBands, x: usize, out_node: usize) {
        let RowBands { per_warp, nt, .. } = bands;
        let (x, out) = (register_value(x), register_value(out_node));
        self.line(indent, &format!("// {} on register fragments", unary_name(op)));
        self.line(indent, &format!("float {out}[{per_warp}][{nt}][4];"));
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(indent + 2, "#pragma unroll");
        self.line(
            indent + 2,
            &format!(
                "for (int q = 0; q < 4; ++q) {{ {out}[mi][nt][q] = {}; }}",
                unary_expr(op, &format!("{x}[mi][nt][q]"))
            ),
        );
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Stores fragment `d` of mma tile (mt, nt) into the f32 tile `c` of an `[m, n]` result with
    /// assignment operator `op` (`=` or `+=`), leaving out what falls outside the result.
    pub(super) fn store_fragment(&mut self, indent: usize, c: &Tile, m: usize, n: usize, op: &str) {
        self.line(indent, "{");
        self.line(indent + 1, "const int r = mt * 16 + (lane >> 2), q = nt * 8 + (lane & 3) * 2;");
        let guard = |row: &str, col: &str| {
            let mut conds = Vec::new();
            if !m.is_multiple_of(16) {
                conds.push(format!("{row} < {m}"));
            }
            if !n.is_multiple_of(8) {
                conds.push(format!("{col} < {n}"));
            }
            if conds.is_empty() { String::new() } else { format!("if ({}) ", conds.join(" && ")) }
        };
        for (i, (row, col)) in [("r", "q"), ("r", "q+1"), ("r+8", "q"), ("r+8", "q+1")].iter().enumerate() {
            let r = c.shape.len();
            self.line(
                indent + 1,
                &format!("{}{}[{}] {op} d[{i}];", guard(row, col), c.var, c.offset_expr(&two(row, col, r))),
            );
        }
        self.line(indent, "}");
    }
}

/// Where a tiled matmul's result goes.
#[derive(Clone, Copy)]
pub(super) enum TiledOut<'t> {
    /// The register accumulator of this node, across iterations.
    Accumulator(usize),
    /// A shared-memory f32 tile.
    Smem(&'t Tile),
}

/// A 32-bit register holding two consecutive-k elements of A (`[m, k]`) at (`row`, `col`): a
/// direct load when the tile holds the mma type with k contiguous and even (a pair never straddles
/// `k`: `col` is even), else two loads and a pack; zero outside the tile where the shape is not a
/// multiple of the mma tile.
fn a_pair_expr(a: &Tile, ty: &str, m: usize, k: usize, row: &str, col: &str) -> String {
    let r = a.shape.len();
    let (sa0, sa1) = (a.strides[r - 2], a.strides[r - 1]);
    let lim = (!m.is_multiple_of(16)).then_some(m);
    let kl = (!k.is_multiple_of(16)).then_some(k);
    if a.ctype == ty && sa1 == 1 && sa0.is_multiple_of(2) && k.is_multiple_of(2) {
        let load = format!("*reinterpret_cast<const uint32_t*>(&{}[({row})*{sa0} + ({col})])", a.var);
        guarded_pair(load, &pair_conds(row, col, lim, kl))
    } else {
        pack_pair(a, ty, (row, col), (row, &format!("{col}+1")), lim, kl)
    }
}

/// A 32-bit register holding two consecutive-k elements of B (`[k, n]`) at (`row`, `col`).
fn b_pair_expr(b: &Tile, ty: &str, k: usize, n: usize, row: &str, col: &str) -> String {
    let r = b.shape.len();
    let (sb0, sb1) = (b.strides[r - 2], b.strides[r - 1]);
    let kl = (!k.is_multiple_of(16)).then_some(k);
    let lim = (!n.is_multiple_of(8)).then_some(n);
    if b.ctype == ty && sb0 == 1 && sb1.is_multiple_of(2) && k.is_multiple_of(2) {
        let load = format!("*reinterpret_cast<const uint32_t*>(&{}[({row}) + ({col})*{sb1}])", b.var);
        guarded_pair(load, &pair_conds(row, col, kl, lim))
    } else {
        pack_pair(b, ty, (row, col), (&format!("{row}+1"), col), kl, lim)
    }
}

/// The bounds a pair at (`row`, `col`) must meet: `row < rows`, `col < cols`, each given only when
/// the tile is not a multiple of the mma tile along that dim.
fn pair_conds(row: &str, col: &str, rows: Option<usize>, cols: Option<usize>) -> Vec<String> {
    let mut conds = Vec::new();
    if let Some(m) = rows {
        conds.push(format!("({row}) < {m}"));
    }
    if let Some(n) = cols {
        conds.push(format!("({col}) < {n}"));
    }
    conds
}

/// `load`, or zero where `conds` fail.
fn guarded_pair(load: String, conds: &[String]) -> String {
    if conds.is_empty() { load } else { format!("({} ? {load} : 0u)", conds.join(" && ")) }
}

/// Two elements of a matrix tile at `lo` and `hi` packed into one operand register: their bits
/// when the tile holds the mma type (`bits16`, `pack_bits`: no round trip through f32), else
/// converted (`pack2`, rounding f32 tiles to the mma type); zero outside the tile.
fn pack_pair(
    t: &Tile,
    ty: &str,
    lo: (&str, &str),
    hi: (&str, &str),
    rows: Option<usize>,
    cols: Option<usize>,
) -> String {
    if t.ctype == ty {
        let bits = |(row, col): (&str, &str)| {
            let v = format!("mirage::bits16({}[{}])", t.var, t.offset_expr(&two(row, col, t.shape.len())));
            guarded_pair(v, &pair_conds(row, col, rows, cols))
        };
        format!("mirage::pack_bits({}, {})", bits(lo), bits(hi))
    } else {
        let at = |(row, col): (&str, &str)| guarded_load(t, row, col, rows, cols);
        format!("mirage::pack2<{ty}>({}, {})", at(lo), at(hi))
    }
}

/// `to_f32(t[row, col])` of a matrix tile, `0.0f` where `row` reaches `rows` or `col` reaches
/// `cols` (each given only when the tile is not a multiple of the mma tile along that dim).
fn guarded_load(t: &Tile, row: &str, col: &str, rows: Option<usize>, cols: Option<usize>) -> String {
    let conds = pair_conds(row, col, rows, cols);
    let v = t.load(&two(row, col, t.shape.len()));
    if conds.is_empty() { v } else { format!("(({}) ? {v} : 0.0f)", conds.join(" && ")) }
}
