//! Percentiles as the tests and benchmarks report them.

/// The `q` quantile (0 < q <= 1) of `samples` by the nearest-rank rule: the smallest value with
/// at least `q` of the samples at or below it. A p99 is then a maximum only below 100 samples,
/// so callers that report one take at least 100.
pub fn percentile<T: Copy + PartialOrd>(samples: &[T], q: f64) -> T {
    assert!(!samples.is_empty() && q > 0.0 && q <= 1.0, "a quantile of no samples, or q outside (0, 1]");
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("comparable samples"));
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let v: Vec<u32> = (1..=200).collect();
        assert_eq!(percentile(&v, 0.99), 198);
        assert_eq!(percentile(&v, 0.5), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        let hundred: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(percentile(&hundred, 0.99), 99, "sorted first");
    }
}
