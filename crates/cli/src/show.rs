//! Names and remote text as the terminal gets them (issue 40, item 6). A name in Maat may
//! hold any UTF-8 but `/` and NUL, and since issue 40 no control character is made into
//! one; names from before, and text other users chose (owners, groups, refusal details),
//! are still shown escaped, so nothing printed can fake an entry or drive the terminal.

use std::borrow::Cow;

/// `name` with control characters and backslashes escaped as GNU `ls -b` does
/// (`\n`, `\t`, `\x1b`, `\\`), so that every name is shown as one unambiguous line.
pub fn name(name: &str) -> Cow<'_, str> {
    if !name.chars().any(|c| c.is_control() || c == '\\') {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        push_escaped(&mut out, c, false);
    }
    Cow::Owned(out)
}

/// Text of several lines (an error and its causes) with every control character but the
/// newline escaped.
pub fn text(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\n' {
            out.push(c);
        } else {
            push_escaped(&mut out, c, true);
        }
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char, keep_backslash: bool) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\\' if !keep_backslash => out.push_str("\\\\"),
        c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_backslashes_are_escaped_and_nothing_else() {
        assert_eq!(name("plain name é"), "plain name é");
        assert!(matches!(name("plain"), Cow::Borrowed(_)));
        assert_eq!(name("a\nb"), "a\\nb");
        assert_eq!(
            name("a\\nb"),
            "a\\\\nb",
            "a backslash is told from a newline"
        );
        assert_eq!(name("x\u{1b}]0;owned\u{7}"), "x\\x1b]0;owned\\x07");
        assert_eq!(name("c1\u{9b}2J"), "c1\\x9b2J");
        assert_eq!(name("del\u{7f}"), "del\\x7f");
        assert_eq!(
            text("line one\nline\u{1b}[2J two"),
            "line one\nline\\x1b[2J two"
        );
        for shown in [name("\u{1b}[31m\n\r\t\u{9b}"), text("\u{1b}[31m\r\t\u{9b}")] {
            assert!(
                !shown.chars().any(|c| c.is_control() && c != '\n'),
                "{shown:?}"
            );
        }
    }
}
