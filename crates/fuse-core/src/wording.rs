//! How messages name things: lists of names and the "did you mean" of a misspelt one.

/// The candidate nearest to `name` (case aside, at most two edits away), for a "did you mean".
pub fn closest(name: &str, candidates: impl IntoIterator<Item = String>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(&name.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, c)| c)
}

/// `text` as a message quotes it: whole when short, else its start and how long it is.
pub fn excerpt(text: &str) -> String {
    const SHOWN: usize = 120;
    match text.char_indices().nth(SHOWN) {
        None => text.to_string(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &text[..end], text.len()),
    }
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
