//! How figures are written for people: sizes in binary units (`16M`, `1536K`), digit groups
//! the way the seeds' cover letters print big numbers (`2 485 692`), relative changes (`+164
//! %`), decimals fewer the larger the figure (`12.3`, `1.23`, `0.123`). One function per
//! convention, used by the argument errors, the commands' text output
//! and the report alike.

/// Bytes in the largest binary unit that divides them: `16M`, `1536K`, `16T`, `100`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u32, &str); 5] = [(50, "P"), (40, "T"), (30, "G"), (20, "M"), (10, "K")];
    UNITS
        .iter()
        .find(|&&(shift, _)| n != 0 && n.is_multiple_of(1u64 << shift))
        .map_or_else(|| n.to_string(), |&(shift, u)| format!("{}{u}", n >> shift))
}

/// Digits in groups of three separated by spaces: `2485692` → `2 485 692`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A ratio as a signed percentage change: `2.64` → `+164 %`, `0.9` → `-10 %`.
pub fn pct(ratio: f64) -> String {
    format!("{:+.0} %", (ratio - 1.0) * 100.0)
}

/// `v` with fewer decimals the larger it is: those of the first `(at_least, decimals)` step
/// that `v` reaches (steps from the largest down), else `finest`.
pub fn by_size(v: f64, steps: &[(f64, usize)], finest: usize) -> String {
    let d = steps
        .iter()
        .find(|&&(at_least, _)| v >= at_least)
        .map_or(finest, |&(_, d)| d);
    format!("{v:.d$}")
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sizes_and_numbers() {
        assert_eq!(human_bytes(16 << 20), "16M");
        assert_eq!(human_bytes(1536 << 10), "1536K");
        let steps = [(10.0, 1), (0.1, 2)];
        assert_eq!(by_size(12.345, &steps, 3), "12.3");
        assert_eq!(by_size(1.2345, &steps, 3), "1.23");
        assert_eq!(by_size(0.012345, &steps, 3), "0.012");
        assert_eq!(by_size(f64::NAN, &steps, 3), "NaN");
        assert_eq!(human_bytes(100), "100");
        assert_eq!(human_bytes(16 << 40), "16T");
        assert_eq!(group(2_485_692), "2 485 692");
        assert_eq!(group(1_000), "1 000");
        assert_eq!(group(999), "999");
        assert_eq!(pct(2.64), "+164 %");
        assert_eq!(pct(1.0), "+0 %");
        assert_eq!(pct(0.9), "-10 %");
    }
}
