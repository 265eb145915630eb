//! The required-output check of τ-bench: strings the agent's answer must contain.

/// Whether `answer` contains every string of `required`, the way τ-bench checks its
/// `outputs`: case-insensitively, and ignoring commas in the answer (so `1,000` in an
/// answer contains the required `1000`).
///
/// # Example
///
/// ```
/// use flowmem_eval::required_outputs_found;
/// let required = vec!["1000".to_string(), "Blue".to_string()];
/// assert!(required_outputs_found(&required, "The blue one costs $1,000."));
/// assert!(!required_outputs_found(&required, "The blue one."));
/// ```
#[must_use]
pub fn required_outputs_found(required: &[String], answer: &str) -> bool {
    let haystack = answer.to_lowercase().replace(',', "");
    required.iter().all(|needle| haystack.contains(&needle.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use crate::outputs::required_outputs_found;

    fn check(required: &[&str], answer: &str, expect: bool) {
        let required: Vec<String> = required.iter().map(|s| s.to_string()).collect();
        assert_eq!(required_outputs_found(&required, answer), expect, "{required:?} in {answer:?}");
    }

    #[test]
    fn nothing_required_is_always_found() {
        check(&[], "", true);
    }

    #[test]
    fn matching_ignores_case_and_thousands_commas() {
        check(&["327"], "Your refund is $3,27", true);
        check(&["1628"], "That is 1,628 dollars", true);
        check(&["Mei"], "MEI", true);
        check(&["327", "1628"], "only 327", false);
    }
}
