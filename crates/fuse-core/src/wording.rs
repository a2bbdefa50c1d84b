//! How messages name things: lists of names and the "did you mean" of a misspelt one.

/// The candidate nearest to `name` (case aside, at most two edits away), for a "did you mean".
/// A swap of two neighbouring letters counts as one edit, as a typist makes it; of candidates
/// as near, the one that keeps more of `name`'s beginning comes first (`sgemvv`: `sgemv`, not
/// `sgemtv`).
pub fn closest(name: &str, candidates: impl IntoIterator<Item = String>) -> Option<String> {
    let name = name.to_lowercase();
    candidates
        .into_iter()
        .map(|c| {
            let lower = c.to_lowercase();
            let shared = name.chars().zip(lower.chars()).take_while(|(a, b)| a == b).count();
            (strsim::osa_distance(&name, &lower), std::cmp::Reverse(shared), c)
        })
        .filter(|(d, _, _)| *d <= 2)
        .min()
        .map(|(_, _, c)| c)
}

/// `text` as a message quotes it: whole when short, else its start and how long it is; what a
/// terminal would not show as it is escaped (see [`printable`]).
pub fn excerpt(text: &str) -> String {
    const SHOWN: usize = 120;
    match text.char_indices().nth(SHOWN) {
        None => printable(text),
        Some((end, _)) => format!("{}… ({} bytes in all)", printable(&text[..end]), text.len()),
    }
}

/// `text` with its control characters and invisible formatting characters (a NUL, an escape
/// sequence, a right-to-left override) escaped, `\x00`, `\n` or `\u{202e}`, so that a message
/// quoting a file's bytes shows them rather than acting on the terminal or vanishing.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Unicode's formatting characters that change how the text around them shows: zero-width
/// ones, direction marks and overrides, the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `a, b and c`, or `none`.
pub fn list_or_none(items: &[&str]) -> String {
    match items {
        [] => "none".to_string(),
        [one] => format!("`{one}`"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|s| format!("`{s}`")).collect();
            format!("{} and `{last}`", init.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_nearest_comes_first_then_the_longer_shared_beginning() {
        let library = names(&["sgemtv", "sgemv", "sger", "sdot"]);
        assert_eq!(closest("sgemvv", library.clone()).as_deref(), Some("sgemv"));
        // A swap of neighbours is one slip, nearer than a letter changed elsewhere.
        assert_eq!(closest("sgmev", library.clone()).as_deref(), Some("sgemv"));
        assert_eq!(closest("SDOT", library.clone()).as_deref(), Some("sdot"));
        assert_eq!(closest("frobnicate", library), None);
    }

    #[test]
    fn unprintable_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("a\0b\x1b[31m\n\tπ"), "a\\x00b\\x1b[31m\\n\\tπ");
        assert_eq!(printable("x\u{202e}y\u{85}"), "x\\u{202e}y\\u{85}");
        assert_eq!(excerpt("{'descr'}\0\0"), "{'descr'}\\x00\\x00");
    }
}
