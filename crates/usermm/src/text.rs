//! Text a user gave (an argument, a profile's name, a path in a job line) that a report or an
//! error line prints back: the one place that decides what a control character is and how it is
//! shown.
//!
//! No kernel file: the kernel's nearest relative is `string_escape_mem` (`%*pE`), which
//! `/proc` files use so that a task's name cannot drive the reader's terminal. Here a control
//! character is what `char::is_control` says (C0, DEL and C1); it is shown as Rust's
//! `escape_default` writes it (`\u{1b}`, `\t`), the same in every message.

/// The first control character of `s`, if any.
pub fn first_control(s: &str) -> Option<char> {
    s.chars().find(|c| c.is_control())
}

/// Whether `s` holds a control character other than a line break (a multi-line text, such as
/// a profile's description, may break lines and nothing else).
pub fn has_control_but_newline(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

/// `s` with every control character shown as its escape (`\u{1b}`), so that it cannot drive
/// the terminal of whoever reads the line.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn controls_found_and_escaped() {
        assert_eq!(first_control("plain name"), None);
        assert_eq!(first_control("a\u{1b}[2Jb"), Some('\u{1b}'));
        assert_eq!(first_control("del\u{7f}"), Some('\u{7f}'));
        assert_eq!(first_control("c1\u{9b}"), Some('\u{9b}'));
        assert_eq!(visible("a\u{1b}[2J\tb"), "a\\u{1b}[2J\\tb");
        assert_eq!(visible("héllo ✓"), "héllo ✓");
        assert!(!has_control_but_newline("two\nlines"));
        assert!(has_control_but_newline("two\rlines"));
    }
}
