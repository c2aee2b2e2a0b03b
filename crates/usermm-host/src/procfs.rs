//! Parsing the host's `/proc` and `/sys` text: one parser per format, used by every reader.
//!
//! `/proc/meminfo`, `/proc/self/smaps`, `/proc/self/smaps_rollup` and `/proc/self/status` share
//! one line format, `Key:   <number> [kB]` (`seq_put_decimal_ull_width` in the kernel's
//! `fs/proc/meminfo.c` and `task_mmu.c`); [`field_kb`] reads it. It is allocation-free and works
//! on bytes, because the forked measurement children read `smaps_rollup` into a stack buffer
//! with it; the parent's readers ([`crate::facts`], the backend's counters) use the same
//! function on their `String`s.
//!
//! The sysfs choice files (`/sys/kernel/mm/transparent_hugepage/enabled`: `always [madvise]
//! never`) mark the selected word with brackets; [`selected_word`] returns it.

/// The number on the line that starts with `key` (e.g. `b"MemTotal:"`), or `None` if no line
/// starts with it or no digits follow. Allocation-free.
///
/// The key must include its colon: `Pss:` must not match `SwapPss:`, nor `Rss:` match
/// `Rss_Anon:`-style keys, so only a key at the start of a line counts.
pub fn field_kb(text: &[u8], key: &[u8]) -> Option<u64> {
    let rest = text
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(key))?;
    let digits = rest.trim_ascii_start();
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    Some(digits[..n].iter().fold(0u64, |v, &b| {
        v.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// The `[selected]` word of a sysfs choice file.
pub fn selected_word(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn fields_are_matched_at_line_starts() {
        let rollup = b"00400000-7fff [rollup]\nRss:   12 kB\nPss:    3 kB\nSwapPss:  9 kB\n";
        assert_eq!(field_kb(rollup, b"Pss:"), Some(3));
        assert_eq!(field_kb(rollup, b"Rss:"), Some(12));
        assert_eq!(field_kb(rollup, b"SwapPss:"), Some(9));
        assert_eq!(field_kb(rollup, b"Anonymous:"), None);
        assert_eq!(
            field_kb(b"MemTotal:\t24684084 kB", b"MemTotal:"),
            Some(24_684_084)
        );
        assert_eq!(field_kb(b"MemTotal: kB\n", b"MemTotal:"), None);
        assert_eq!(
            field_kb(b"Big: 99999999999999999999999 kB", b"Big:"),
            Some(u64::MAX)
        );
    }

    #[test]
    fn selected_words() {
        assert_eq!(selected_word("always [madvise] never\n"), Some("madvise"));
        assert_eq!(selected_word("always madvise never\n"), None);
    }
}
