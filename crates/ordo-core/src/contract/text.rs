//! Untrusted text on its way out: to a log line, an operator's terminal or
//! a stored record.
//!
//! A handler's error text, a stream entry's type name or envelope and a
//! configuration file's lines come from code and data Ordo does not
//! control. Three helpers keep them from reaching further than they should:
//!
//! - [`escaped`] / [`Escaped`]: control characters (C0, DEL, C1), bidi
//!   controls and Unicode line separators written as escapes (`\n`, `\r`,
//!   `\t`, `\u{1b}`), so a newline cannot forge a log line and an escape
//!   sequence cannot reach a terminal (OSC 52 clipboard writes, screen
//!   clears, reordered text). [`log_text`] is the form every log field of
//!   untrusted text uses: escaped and capped at [`MAX_ERROR_TEXT`].
//! - [`capped`]: text cut to a byte budget on a character boundary, saying
//!   how much was cut; what halt records, parked keys, dead letters and
//!   failure records store of an error ([`cap_error`]).
//! - [`redact_secrets`]: the passwords of connection URLs (and `password=`
//!   parameters) in free text masked, for messages that quote
//!   configuration lines.

use std::borrow::Cow;
use std::fmt;

/// The most bytes of a handler's error text Ordo stores (in a halt record,
/// a parked key's record, a dead letter, an inline failure) or writes to
/// one log line; longer text is cut, with a note saying how much was.
pub const MAX_ERROR_TEXT: usize = 4 * 1024;

/// Whether `c` is written as an escape rather than as itself: control
/// characters (C0, DEL, C1), the bidi controls (which reorder the text
/// around them on a terminal) and the Unicode line and paragraph
/// separators (which some log viewers break lines at).
pub fn is_hostile(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
        )
}

/// `text` with every [hostile](is_hostile) character written as an escape
/// (`\n`, `\r`, `\t`, else `\u{hex}`); borrowed when there is none.
///
/// ```
/// use ordo_core::contract::text::escaped;
///
/// assert_eq!(escaped("plain text, ü"), "plain text, ü");
/// assert_eq!(escaped("a\nb\x1b]52;c;aGk=\x07"), "a\\nb\\u{1b}]52;c;aGk=\\u{7}");
/// ```
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    // Writing to a String cannot fail.
    let _ = write_escaped(&mut out, text);
    Cow::Owned(out)
}

fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find(is_hostile) {
        out.write_str(&rest[..at])?;
        let c = rest[at..].chars().next().expect("a character at `at`");
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c => write!(out, "\\u{{{:x}}}", u32::from(c))?,
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// Untrusted text shown [escaped] and cut at `max` bytes: the
/// [`Display`](fmt::Display) form of [`log_text`].
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a> {
    text: &'a str,
    max: usize,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &capped(self.text, self.max))
    }
}

/// `text` for a log field: [escaped], so a newline, a carriage
/// return or an escape sequence cannot forge a log line or reach an
/// operator's terminal, and cut at [`MAX_ERROR_TEXT`] bytes. Every log
/// field that carries a handler's error text (`error = %log_text(&text)`)
/// goes through it, on every broker.
///
/// ```
/// use ordo_core::contract::text::log_text;
///
/// let forged = "boom\n2025-01-01T00:00:00Z  INFO ordo: all good";
/// assert_eq!(log_text(forged).to_string(), "boom\\n2025-01-01T00:00:00Z  INFO ordo: all good");
/// ```
pub fn log_text(text: &str) -> Escaped<'_> {
    Escaped {
        text,
        max: MAX_ERROR_TEXT,
    }
}

/// `text` cut to at most `max` bytes, on a character boundary, ending in a
/// note that says how many bytes were cut (the note counts towards `max`);
/// borrowed when it fits. Capping capped text changes nothing.
///
/// ```
/// use ordo_core::contract::text::capped;
///
/// assert_eq!(capped("short", 100), "short");
/// let long = "é".repeat(1_000); // 2,000 bytes
/// let cut = capped(&long, 100);
/// assert!(cut.len() <= 100);
/// assert!(cut.ends_with("[1928 of 2000 bytes cut]"), "{cut}");
/// ```
pub fn capped(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    // The note's length depends on how much is cut, which depends on the
    // note's length: start from the longest note and settle.
    let total = text.len();
    let mut keep = max.saturating_sub(note(total, total).len());
    loop {
        let boundary = floor_char_boundary(text, keep);
        let note = note(total - boundary, total);
        if boundary + note.len() <= max || boundary == 0 {
            let mut out = String::with_capacity(boundary + note.len());
            out.push_str(&text[..boundary]);
            out.push_str(&note);
            return Cow::Owned(out);
        }
        keep = boundary - 1;
    }
}

/// The note that ends cut text.
fn note(cut: usize, total: usize) -> String {
    format!("… [{cut} of {total} bytes cut]")
}

/// The largest character boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A handler's error text as Ordo stores it: [capped] at [`MAX_ERROR_TEXT`].
pub fn cap_error(text: String) -> String {
    match capped(&text, MAX_ERROR_TEXT) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

/// `text` with the secrets of the connection URLs in it masked, for a
/// message that may quote a configuration line (a TOML parse error does):
/// on each line, whatever stands between a `://` and the last `@` after it
/// (a URL's user info; a malformed URL's too) is masked, keeping a user
/// name before a `:`, and the value of every `...password=` parameter.
/// Masks more than a well-formed URL needs rather than less.
///
/// ```
/// use ordo_core::contract::text::redact_secrets;
///
/// assert_eq!(
///     redact_secrets("2 | url = redis://app:s3cret@db:6379/0"),
///     "2 | url = redis://app:***@db:6379/0"
/// );
/// assert_eq!(
///     redact_secrets("url = \"rediss://h?sentinelPassword=pw&x=1\""),
///     "url = \"rediss://h?sentinelPassword=***&x=1\""
/// );
/// ```
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&redact_passwords(&redact_user_info(line)));
    }
    out
}

/// The mask that stands for a secret.
const MASK: &str = "***";

/// `line` with what stands between each `://` and the last `@` after it masked.
fn redact_user_info(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(scheme_end) = rest.find("://") {
        let (head, tail) = rest.split_at(scheme_end + 3);
        out.push_str(head);
        match tail.rfind('@') {
            Some(at) => {
                let user_info = &tail[..at];
                if let Some((user, _)) = user_info.split_once(':')
                    && !user.contains('/')
                {
                    out.push_str(user);
                    out.push(':');
                }
                out.push_str(MASK);
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// `line` with the value of every `...password=value` masked (up to a
/// space, `&`, `#`, `,` or a quote; a quoted value up to its closing quote).
fn redact_passwords(line: &str) -> String {
    let lower = line.to_ascii_lowercase();
    let mut out = String::with_capacity(line.len());
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let mut at = from + found + "password".len();
        let bytes = line.as_bytes();
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        let mut value = at;
        while value < bytes.len() && bytes[value] == b' ' {
            value += 1;
        }
        if value >= bytes.len() || bytes[value] != b'=' {
            out.push_str(&line[from..at]);
            from = at;
            continue;
        }
        value += 1;
        while value < bytes.len() && bytes[value] == b' ' {
            value += 1;
        }
        let end = match bytes.get(value) {
            Some(&quote @ (b'"' | b'\'')) => line[value + 1..]
                .find(char::from(quote))
                .map_or(line.len(), |close| value + 1 + close + 1),
            _ => line[value..]
                .find([' ', '&', '#', ',', '"', '\''])
                .map_or(line.len(), |stop| value + stop),
        };
        out.push_str(&line[from..value]);
        out.push_str(MASK);
        from = end;
    }
    out.push_str(&line[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bidi_and_separators_are_escaped_and_the_rest_kept() {
        assert_eq!(escaped("ok: ü ñ 中 🙂"), "ok: ü ñ 中 🙂");
        assert!(matches!(escaped("plain"), Cow::Borrowed(_)));
        assert_eq!(escaped("a\r\nb\tc"), "a\\r\\nb\\tc");
        assert_eq!(
            escaped("\x1b[2J\x1b]52;c;SGk=\x07"),
            "\\u{1b}[2J\\u{1b}]52;c;SGk=\\u{7}"
        );
        assert_eq!(escaped("\u{9b}31m\u{7f}"), "\\u{9b}31m\\u{7f}");
        assert_eq!(escaped("abc\u{202e}fed\u{2066}"), "abc\\u{202e}fed\\u{2066}");
        assert_eq!(escaped("one\u{2028}two"), "one\\u{2028}two");
        assert_eq!(escaped("\0"), "\\u{0}");
    }

    #[test]
    fn the_log_form_is_escaped_and_capped() {
        let long = format!("{}\n", "x".repeat(MAX_ERROR_TEXT * 2));
        let logged = log_text(&long).to_string();
        assert!(logged.len() <= MAX_ERROR_TEXT, "{}", logged.len());
        assert!(!logged.contains('\n'));
        assert!(logged.ends_with("bytes cut]"), "{logged}");
    }

    #[test]
    fn capping_cuts_on_a_character_boundary_and_says_how_much() {
        for max in 0..64 {
            let text = "aé中🙂".repeat(10);
            let cut = capped(&text, max);
            assert!(
                cut.len() <= max.max(note(text.len(), text.len()).len()),
                "{max}: {cut}"
            );
            if text.len() > max {
                let kept = cut.split("…").next().unwrap();
                assert!(text.starts_with(kept));
                let cut_bytes = text.len() - kept.len();
                assert!(
                    cut.ends_with(&format!("[{cut_bytes} of {} bytes cut]", text.len())),
                    "{cut}"
                );
            }
        }
        let once = capped(&"x".repeat(10_000), 100).into_owned();
        assert_eq!(capped(&once, 100), once, "capping again changes nothing");
        assert_eq!(cap_error("short".to_owned()), "short");
        assert!(cap_error("y".repeat(MAX_ERROR_TEXT + 1)).len() <= MAX_ERROR_TEXT);
    }

    #[test]
    fn url_passwords_in_text_are_masked() {
        for (text, redacted) in [
            ("url = redis://app:s3cret@h:1/0", "url = redis://app:***@h:1/0"),
            ("url = \"redis://:s3cret@h\"", "url = \"redis://:***@h\""),
            ("url = 'redis://tok@h'", "url = 'redis://***@h'"),
            // A malformed URL: a quote, a space or a second URL in the password.
            ("url = \"redis://u:p\\\"w@h\"", "url = \"redis://u:***@h\""),
            ("url = redis://u:pa ss@h", "url = redis://u:***@h"),
            ("a = 'redis://h/0' # https://u:p@x", "a = 'redis://***@x"),
            ("no url here", "no url here"),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("host=db password=s3cret user=o", "host=db password=*** user=o"),
            ("x?sentinelPassword=pw&y=1", "x?sentinelPassword=***&y=1"),
            ("password = \"two words\" # c", "password = *** # c"),
            ("Password", "Password"),
        ] {
            assert_eq!(redact_secrets(text), redacted, "{text}");
        }
        assert_eq!(
            redact_secrets("line 1\n2 | url = redis://a:b@c\n  |       ^"),
            "line 1\n2 | url = redis://a:***@c\n  |       ^"
        );
    }
}
