//! Shapes and strides, and the shape rules of the operators: broadcasting, matmul,
//! concatenation, reductions, the RMS-norm weight, rotary embeddings, gathers and argmax.
//!
//! Every rule is a pure function of shapes that returns the result's shape or a [`ShapeError`]
//! saying which rule failed, with the sizes involved. The `#[mugraph]` checker wraps it into a
//! compile error at the offending tokens, the IR into an error naming the operator.
//!
//! ```
//! use mirage_core::shape::{broadcast_shape, matmul_shape, row_major_strides};
//!
//! assert_eq!(row_major_strides(&[2, 3, 4]), vec![12, 4, 1]);
//! assert_eq!(broadcast_shape(&[8, 1], &[1, 64]).unwrap(), vec![8, 64]);
//! assert_eq!(matmul_shape(&[8, 64], &[64, 32]).unwrap(), vec![8, 32]);
//! let e = matmul_shape(&[8, 64], &[32, 64]).unwrap_err();
//! assert!(e.to_string().starts_with("inner dims differ"));
//! ```

use std::fmt;

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 4;

/// The most elements a tensor or tile may have (2^48): far beyond any device, and small enough
/// that no shape rule, stride or offset computation can overflow.
pub const MAX_ELEMENTS: usize = 1 << 48;

/// The largest upper bound a runtime-sized dim (`#[mugraph(dims(B = 1..=64))]`) may declare:
/// sizes fit an `int` kernel parameter with room for tile arithmetic.
pub const MAX_DIM_VAR: usize = 1 << 20;

/// A shape rule was broken: the rule, with the sizes that broke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

fn broken<T>(rule: impl Into<String>) -> Result<T, ShapeError> {
    Err(ShapeError(rule.into()))
}

/// Formats a shape as `[8, 4096]`.
pub fn fmt_shape(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// Row-major (C order, last dim contiguous) element strides of a shape. Saturates instead of
/// overflowing; a shape whose strides saturate has too many elements for [`check_shape`].
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].saturating_mul(shape[d + 1]);
    }
    strides
}

/// Number of elements of a shape.
pub fn num_elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Number of elements an allocation with these strides must hold (largest offset + 1).
pub fn storage_len(shape: &[usize], strides: &[usize]) -> usize {
    1 + shape.iter().zip(strides).map(|(&n, &s)| n.saturating_sub(1) * s).sum::<usize>()
}

/// Rank 1..=[`MAX_RANK`], every dim at least 1, at most [`MAX_ELEMENTS`] elements.
pub fn check_shape(shape: &[usize]) -> Result<(), ShapeError> {
    if shape.is_empty() || shape.len() > MAX_RANK {
        return broken(format!("rank must be 1..={MAX_RANK}, found {}", shape.len()));
    }
    if shape.contains(&0) {
        return broken("every dimension must be at least 1");
    }
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none_or(|n| n > MAX_ELEMENTS) {
        return broken("a tensor may have at most 2^48 elements");
    }
    Ok(())
}

/// Strides for `shape`: one per dim, addressing distinct elements (sorted by stride, each stride
/// of a dim with extent above 1 is at least the span of the smaller ones), the largest offset
/// below [`MAX_ELEMENTS`].
pub fn check_strides(shape: &[usize], strides: &[usize]) -> Result<(), ShapeError> {
    if strides.len() != shape.len() {
        return broken(format!("strides must have one entry per dim ({}), found {}", shape.len(), strides.len()));
    }
    let mut dims: Vec<(usize, usize)> =
        strides.iter().copied().zip(shape.iter().copied()).filter(|&(_, n)| n > 1).collect();
    dims.sort_unstable();
    let mut span = 1usize;
    for (stride, extent) in dims {
        if stride < span {
            return broken(format!(
                "these strides alias (two different indices would address the same element): a stride of {stride} is below {span}, the span of the dims with smaller strides"
            ));
        }
        span = stride.saturating_mul(extent);
    }
    let largest_offset =
        shape.iter().zip(strides).try_fold(0usize, |o, (&n, &s)| n.saturating_sub(1).checked_mul(s)?.checked_add(o));
    if largest_offset.is_none_or(|o| o >= MAX_ELEMENTS) {
        return broken("the layout may span at most 2^48 elements");
    }
    Ok(())
}

/// `dim < rank`.
pub fn check_dim(shape: &[usize], dim: usize) -> Result<(), ShapeError> {
    if dim >= shape.len() {
        return broken(format!("dim {dim} is out of range for rank {}", shape.len()));
    }
    Ok(())
}

/// Size-1 broadcasting between shapes of equal rank: each dim equal, or 1 on one side.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if a.len() != b.len() {
        return broken(format!(
            "ranks differ ({} and {}); operands must have the same rank (only size-1 dims broadcast)",
            a.len(),
            b.len()
        ));
    }
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(d, (&x, &y))| {
            if x == y || y == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(y)
            } else {
                broken(format!("dim {d} has sizes {x} and {y}; each dim must be equal or 1 on one side"))
            }
        })
        .collect()
}

/// `[..., m, k] x [..., k, n] -> [..., m, n]`: equal rank (at least 2), equal batch dims.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if a.len() != b.len() {
        return broken(format!("ranks differ ({} and {}); operands must have the same rank", a.len(), b.len()));
    }
    let r = a.len();
    if r < 2 {
        return broken("operands must have rank at least 2 ([..., m, k] x [..., k, n])");
    }
    if a[..r - 2] != b[..r - 2] {
        return broken(format!(
            "batch dims differ ({} and {}); they must be equal",
            fmt_shape(&a[..r - 2]),
            fmt_shape(&b[..r - 2])
        ));
    }
    if a[r - 1] != b[r - 2] {
        return broken(format!(
            "inner dims differ: a is [.., m, k] with k = {}, b is [.., k, n] with k = {}",
            a[r - 1],
            b[r - 2]
        ));
    }
    let mut out = a.to_vec();
    out[r - 1] = b[r - 1];
    Ok(out)
}

/// `concat(a, b, dim)`: equal rank, equal sizes except along `dim`.
pub fn concat_shape(a: &[usize], b: &[usize], dim: usize) -> Result<Vec<usize>, ShapeError> {
    if a.len() != b.len() {
        return broken(format!("ranks differ ({} and {}); operands must have the same rank", a.len(), b.len()));
    }
    check_dim(a, dim)?;
    if let Some(d) = (0..a.len()).find(|&d| d != dim && a[d] != b[d]) {
        return broken(format!("dim {d} differs ({} vs {}); only the concat dim may differ", a[d], b[d]));
    }
    let mut out = a.to_vec();
    out[dim] = match a[dim].checked_add(b[dim]) {
        Some(n) => n,
        None => return broken("the concatenated dim overflows usize"),
    };
    if out.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
        return broken("the number of elements of the result overflows usize");
    }
    Ok(out)
}

/// A reduction of `dim` to `width` elements (1 for a full reduction) with strided grouping:
/// output `j` combines inputs `j, j + width, j + 2·width, …`.
pub fn reduce_shape(shape: &[usize], dim: usize, width: usize) -> Result<Vec<usize>, ShapeError> {
    check_dim(shape, dim)?;
    if width == 0 || !shape[dim].is_multiple_of(width) {
        return broken(format!("reduction width {width} must divide dim {dim} (size {})", shape[dim]));
    }
    let mut out = shape.to_vec();
    out[dim] = width;
    Ok(out)
}

/// The weight of an RMS norm of `x`: `x`'s rank, leading dims 1 and `x`'s last dim.
pub fn check_rms_norm_weight(x: &[usize], weight: &[usize]) -> Result<(), ShapeError> {
    let Some(last) = x.len().checked_sub(1) else {
        return broken("x must have rank at least 1");
    };
    let ok = weight.len() == x.len() && weight[last] == x[last] && weight[..last].iter().all(|&d| d == 1);
    if !ok {
        let mut want = vec![1; last];
        want.push(x[last]);
        return broken(format!(
            "the weight must have x's rank, leading dims 1 and x's last dim: shape {}",
            fmt_shape(&want)
        ));
    }
    Ok(())
}

/// `rope(x, cos, sin)`: `cos` and `sin` have one shape, `x`'s rank, and leading dims equal to
/// `x`'s or 1 (they broadcast); their last dim `h/2` gives the head size `h`, which must divide
/// `x`'s last dim (each head of `h` elements is rotated alike). The result has `x`'s shape.
pub fn rope_shape(x: &[usize], cos: &[usize], sin: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if cos != sin {
        return broken(format!("cos and sin must have one shape, found {} and {}", fmt_shape(cos), fmt_shape(sin)));
    }
    if cos.len() != x.len() {
        return broken(format!(
            "cos and sin must have x's rank {} (leading dims equal to x's or 1, then the half head size), found rank {}",
            x.len(),
            cos.len()
        ));
    }
    let last = x.len() - 1;
    if let Some(d) = (0..last).find(|&d| cos[d] != x[d] && cos[d] != 1) {
        return broken(format!("dim {d} of cos and sin is {}; it must be x's ({}) or 1", cos[d], x[d]));
    }
    let head = cos[last].checked_mul(2).filter(|&h| x[last].is_multiple_of(h));
    if head.is_none() {
        return broken(format!(
            "the last dim of cos and sin ({}) is half the head size, so twice it must divide x's last dim ({})",
            cos[last], x[last]
        ));
    }
    Ok(x.to_vec())
}

/// `gather(table, ids)`: rows of a `[rows, width]` table at the ids: the result is `ids`'s shape
/// followed by `width` (rank at most [`MAX_RANK`]); `rows` at most 2^24 (indices are exact as
/// f32 values inside kernels).
pub fn gather_shape(table: &[usize], ids: &[usize]) -> Result<Vec<usize>, ShapeError> {
    if table.len() != 2 {
        return broken(format!("the table must have rank 2 ([rows, width]), found {}", fmt_shape(table)));
    }
    if table[0] > crate::DType::MAX_INDEX_EXTENT {
        return broken(format!("the table has {} rows; at most 2^24 rows can be indexed", table[0]));
    }
    if ids.len() >= MAX_RANK {
        return broken(format!(
            "the result has the ids' rank plus one; ids of rank {} would give rank {} (at most {MAX_RANK})",
            ids.len(),
            ids.len() + 1
        ));
    }
    let mut out = ids.to_vec();
    out.push(table[1]);
    Ok(out)
}

/// `argmax(x, dim)`: the position of the maximum along `dim`, kept with size 1; `dim` has at
/// most 2^24 elements (positions are exact as f32 values inside kernels).
pub fn argmax_shape(x: &[usize], dim: usize) -> Result<Vec<usize>, ShapeError> {
    check_dim(x, dim)?;
    if x[dim] > crate::DType::MAX_INDEX_EXTENT {
        return broken(format!("dim {dim} has {} elements; at most 2^24 positions can be returned", x[dim]));
    }
    let mut out = x.to_vec();
    out[dim] = 1;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_sizes() {
        assert_eq!(row_major_strides(&[7]), vec![1]);
        assert_eq!(row_major_strides(&[2, 3, 4, 5]), vec![60, 20, 5, 1]);
        assert_eq!(row_major_strides(&[2, usize::MAX, 2]), vec![usize::MAX, 2, 1]);
        assert_eq!(num_elements(&[2, 3, 4]), 24);
        assert_eq!(storage_len(&[4, 8], &[1, 4]), 32);
        assert_eq!(storage_len(&[4, 8], &[16, 1]), 56);
    }

    #[test]
    fn shape_checks() {
        assert!(check_shape(&[8, 4096]).is_ok());
        assert!(check_shape(&[]).is_err());
        assert!(check_shape(&[1, 1, 1, 1, 1]).is_err());
        assert!(check_shape(&[8, 0]).is_err());
        assert!(check_shape(&[1 << 25, 1 << 24]).is_err());
        assert!(check_strides(&[4, 8], &[1, 4]).is_ok());
        assert!(check_strides(&[4, 8], &[8, 1]).is_ok());
        assert!(check_strides(&[4, 8], &[4, 1]).expect_err("breaks the rule").0.contains("alias"));
        assert!(check_strides(&[4, 8], &[1]).is_err());
        // Dims of extent 1 may have any stride.
        assert!(check_strides(&[1, 8], &[0, 1]).is_ok());
    }

    #[test]
    fn rules() {
        assert_eq!(broadcast_shape(&[3, 1, 24], &[3, 5, 1]).expect("follows the rule"), vec![3, 5, 24]);
        assert!(broadcast_shape(&[8, 64], &[64]).expect_err("breaks the rule").0.starts_with("ranks differ (2 and 1)"));
        assert!(
            broadcast_shape(&[8, 64], &[8, 32])
                .expect_err("breaks the rule")
                .0
                .starts_with("dim 1 has sizes 64 and 32")
        );
        assert_eq!(matmul_shape(&[3, 7, 40], &[3, 40, 9]).expect("follows the rule"), vec![3, 7, 9]);
        assert!(
            matmul_shape(&[2, 7, 40], &[3, 40, 9]).expect_err("breaks the rule").0.starts_with("batch dims differ")
        );
        assert!(matmul_shape(&[40], &[40]).is_err());
        assert_eq!(concat_shape(&[2, 3], &[2, 5], 1).expect("follows the rule"), vec![2, 8]);
        assert!(concat_shape(&[2, 3], &[4, 5], 1).expect_err("breaks the rule").0.starts_with("dim 0 differs"));
        assert!(concat_shape(&[2, 3], &[2, 3], 2).is_err());
        assert_eq!(reduce_shape(&[4, 64], 1, 1).expect("follows the rule"), vec![4, 1]);
        assert_eq!(reduce_shape(&[4, 64], 1, 16).expect("follows the rule"), vec![4, 16]);
        assert!(reduce_shape(&[4, 64], 1, 24).is_err());
        assert!(reduce_shape(&[4, 64], 2, 1).is_err());
        assert!(check_rms_norm_weight(&[8, 64], &[1, 64]).is_ok());
        assert!(check_rms_norm_weight(&[8, 64], &[64]).expect_err("breaks the rule").0.ends_with("shape [1, 64]"));
        assert!(check_rms_norm_weight(&[8, 64], &[8, 64]).is_err());
        assert_eq!(rope_shape(&[7, 256], &[7, 64], &[7, 64]).expect("two heads of 128"), vec![7, 256]);
        assert!(rope_shape(&[2, 7, 64], &[1, 7, 32], &[1, 7, 32]).is_ok());
        assert!(rope_shape(&[7, 96], &[7, 64], &[7, 64]).expect_err("128 does not divide 96").0.contains("twice"));
        assert!(rope_shape(&[7, 128], &[7, 64], &[1, 64]).expect_err("differ").0.starts_with("cos and sin"));
        assert!(rope_shape(&[7, 128], &[3, 64], &[3, 64]).expect_err("3 vs 7").0.starts_with("dim 0"));
        assert!(rope_shape(&[7, 128], &[64], &[64]).is_err());
        assert_eq!(gather_shape(&[100, 16], &[2, 5]).expect("follows the rule"), vec![2, 5, 16]);
        assert!(gather_shape(&[100, 16, 2], &[5]).is_err());
        assert!(gather_shape(&[100, 16], &[1, 2, 3, 4]).expect_err("rank 5").0.contains("rank 5"));
        assert!(gather_shape(&[(1 << 24) + 1, 2], &[3]).is_err());
        assert_eq!(argmax_shape(&[4, 6, 40], 2).expect("follows the rule"), vec![4, 6, 1]);
        assert!(argmax_shape(&[4, 6], 2).is_err());
    }
}
