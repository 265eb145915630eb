//! "Did you mean …?": the nearest known name to a misspelt one.
//!
//! The one home of the suggestion every unknown-name error makes: an unknown field of a
//! graph file or of `flowmem.toml` (from serde's "unknown field `x`, expected one of …"
//! message, see [`unknown_field`]), an unknown prompt template name.

/// The candidate nearest to `word` by edit distance (insertions, deletions,
/// substitutions, and swaps of neighbours, case-insensitive), if one is near enough to
/// be a likely typo: at most a third of the longer name's length, and at least 1.
///
/// # Example
///
/// ```
/// use flowmem_model::nearest;
///
/// assert_eq!(nearest("hint", ["hints", "instruction", "bindings"]), Some("hints"));
/// assert_eq!(nearest("instrucion", ["hints", "instruction"]), Some("instruction"));
/// assert_eq!(nearest("colour", ["hints", "instruction"]), None);
/// ```
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lower = word.to_lowercase();
    candidates
        .into_iter()
        .map(|candidate| (distance(&word_lower, &candidate.to_lowercase()), candidate))
        .filter(|(distance, candidate)| {
            let longer = word.chars().count().max(candidate.chars().count());
            *distance <= (longer / 3).max(1)
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Reads serde's message about an unknown field or variant (`unknown field `hint`,
/// expected one of `hints`, `instruction``) into the unknown name and the nearest
/// expected one, if any is near.
///
/// # Example
///
/// ```
/// use flowmem_model::unknown_field;
///
/// let message = "unknown field `hint`, expected one of `hints`, `instruction`, `bindings`";
/// assert_eq!(unknown_field(message), Some(("hint", Some("hints"))));
/// assert_eq!(unknown_field("invalid type: integer"), None);
/// ```
pub fn unknown_field(message: &str) -> Option<(&str, Option<&str>)> {
    let rest = message
        .find("unknown field `")
        .map(|at| &message[at + "unknown field `".len()..])
        .or_else(|| message.find("unknown variant `").map(|at| &message[at + "unknown variant `".len()..]))?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2);
    Some((unknown, nearest(unknown, expected)))
}

/// `message` with `hint: did you mean `NEAREST`?` on a line of its own when it is serde's
/// message about an unknown field (or variant) near a known one; as it is otherwise.
///
/// # Example
///
/// ```
/// let message = "unknown field `modle`, expected one of `kind`, `model`".to_owned();
/// assert_eq!(
///     flowmem_model::with_suggestion(message),
///     "unknown field `modle`, expected one of `kind`, `model`\nhint: did you mean `model`?"
/// );
/// ```
#[must_use]
pub fn with_suggestion(message: String) -> String {
    match unknown_field(&message) {
        Some((_, Some(nearest))) => {
            let nearest = nearest.to_owned();
            format!("{}\nhint: did you mean `{nearest}`?", message.trim_end())
        }
        _ => message,
    }
}

/// Damerau-Levenshtein distance (optimal string alignment) over chars.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut rows = vec![0usize; (a.len() + 1) * width];
    for (j, cell) in rows.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        rows[i * width] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[(i - 1) * width + j] + 1)
                .min(rows[i * width + j - 1] + 1)
                .min(rows[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[(i - 2) * width + j - 2] + 1);
            }
            rows[i * width + j] = best;
        }
    }
    rows[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use crate::suggest::{distance, nearest, unknown_field};

    #[test]
    fn distances_count_edits_and_swaps() {
        assert_eq!(distance("hint", "hints"), 1);
        assert_eq!(distance("instrucion", "instruction"), 1);
        assert_eq!(distance("synthesise", "synthesize"), 1);
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn far_names_are_not_suggested() {
        assert_eq!(nearest("x", ["hints"]), None);
        assert_eq!(nearest("modle", ["kind", "model", "base_url"]), Some("model"));
        assert_eq!(nearest("HINTS", ["hints"]), Some("hints"));
    }

    #[test]
    fn serde_messages_are_read() {
        let message = "unknown field `modle`, expected one of `kind`, `base_url`, `model`";
        assert_eq!(unknown_field(message), Some(("modle", Some("model"))));
        assert_eq!(unknown_field("unknown field `zzz`, expected `a` or `b`"), Some(("zzz", None)));
        assert_eq!(unknown_field("unknown field `zzz`, there are no fields"), Some(("zzz", None)));
        assert_eq!(unknown_field("unknown variant `lop`, expected one of `loop`, `join`"), Some(("lop", Some("loop"))));
    }
}
