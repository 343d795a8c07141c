//! Human-readable figures for the text output, and the one helper every
//! text output goes through ([`text`]).

use std::borrow::Cow;
use std::time::Duration;

/// `text` safe to print on a terminal: control characters (C0, DEL, C1),
/// bidi controls and line separators written as escapes (`\n`, `\r`,
/// `\u{1b}`, `\u{202e}`), so an error text or an entry type from Redis
/// cannot clear the screen, write the clipboard (OSC 52), move the cursor
/// to forge a line, or reorder what is shown. Every text output of `ordo`
/// goes through it: each table cell, each value of `inspect` and `dlq
/// inspect`, warnings and errors. The `--json` output is left as it is
/// (JSON escapes control characters itself).
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    ordo_core::contract::text::escaped(text)
}

/// `850ms`, `12s`, `5m 02s`, `3h 04m`, `2d 03h`.
pub(crate) fn duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let s = duration.as_secs();
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3_600 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// How long before `now_ms` the time `at_ms` was (both server clock).
pub(crate) fn ago(now_ms: u64, at_ms: u64) -> String {
    format!(
        "{} ago",
        duration(Duration::from_millis(now_ms.saturating_sub(at_ms)))
    )
}

/// `text` cut to `max` characters, with `…` when cut, on one line.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A number with thousands separators: `12,345`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 attempt`, `3 attempts`.
pub(crate) fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{} {noun}s", count(n))
    }
}

/// `word` as one shell word: as is when it is plain, else quoted.
pub(crate) fn shell_word(word: &str) -> String {
    // Only a NUL cannot be quoted; names and keys cannot hold control
    // characters, so the fallback is for completeness.
    shlex::try_quote(word).map_or_else(|_| format!("{word:?}"), std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_secs(12)), "12s");
        assert_eq!(duration(Duration::from_secs(302)), "5m 02s");
        assert_eq!(duration(Duration::from_secs(3 * 3600 + 240)), "3h 04m");
        assert_eq!(duration(Duration::from_secs(2 * 86_400 + 3 * 3600)), "2d 03h");
    }

    #[test]
    fn terminal_controls_are_escaped_in_text_output() {
        assert_eq!(text("ok ü"), "ok ü");
        assert_eq!(
            text("\x1b]52;c;SGk=\x07\x1b[2J\rforged\u{9b}\u{202e}"),
            "\\u{1b}]52;c;SGk=\\u{7}\\u{1b}[2J\\rforged\\u{9b}\\u{202e}"
        );
    }

    #[test]
    fn long_text_is_cut_on_one_line() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("line one\nline two", 12), "line one li…");
    }

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_word("c-1"), "c-1");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word("it's"), "\"it's\"");
        for word in ["a b", "it's", "$HOME", "`x`", "a\\b", "\"q\"", "ü ñ"] {
            let quoted = shell_word(word);
            assert_eq!(shlex::split(&quoted), Some(vec![word.to_owned()]), "{quoted}");
        }
    }

    #[test]
    fn nouns_agree_with_their_count() {
        assert_eq!(plural(1, "attempt"), "1 attempt");
        assert_eq!(plural(2, "dead letter"), "2 dead letters");
        assert_eq!(plural(1_000, "message"), "1,000 messages");
    }

    #[test]
    fn counts_have_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(12_345), "12,345");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
