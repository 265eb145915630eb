//! Process trees: the operators, PM4Py's printed notation, folding and canonical order.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

/// A process tree operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Operator {
    /// `->`: the children run one after another, in order.
    #[serde(rename = "->")]
    Sequence,
    /// `X`: exactly one child runs.
    #[serde(rename = "X")]
    Xor,
    /// `+`: every child runs, interleaved in any order.
    #[serde(rename = "+")]
    Parallel,
    /// `*`: the first child (do) runs, then zero or more times the second (redo) and the
    /// do again. Loops are binary.
    #[serde(rename = "*")]
    Loop,
}

/// A process tree over activity names.
///
/// `Display` prints PM4Py's notation, for example `->( 'a', X( 'b', 'c' ), *( 'd', tau ) )`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProcessTree {
    /// The silent step.
    Tau,
    /// One activity.
    Activity {
        /// The activity's name.
        label: String,
    },
    /// An operator over children.
    Operator {
        /// The operator.
        operator: Operator,
        /// The children, in order; a loop has exactly two (do, redo).
        children: Vec<ProcessTree>,
    },
}

/// A tree string that is not in PM4Py's notation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse process tree at byte {position}: {reason}")]
pub struct TreeParseError {
    /// The byte offset where parsing stopped.
    pub position: usize,
    /// What was expected there.
    pub reason: &'static str,
}

impl Operator {
    /// PM4Py's symbol for the operator.
    #[must_use]
    pub fn symbol(self) -> &'static str {
        match self {
            Operator::Sequence => "->",
            Operator::Xor => "X",
            Operator::Parallel => "+",
            Operator::Loop => "*",
        }
    }
}

impl ProcessTree {
    /// A leaf for activity `label`.
    #[must_use]
    pub fn activity(label: impl Into<String>) -> ProcessTree {
        ProcessTree::Activity { label: label.into() }
    }

    /// An operator node.
    #[must_use]
    pub fn operator(operator: Operator, children: Vec<ProcessTree>) -> ProcessTree {
        ProcessTree::Operator { operator, children }
    }

    /// Parses PM4Py's notation, as printed by `str(tree)` in PM4Py and by `Display` here.
    ///
    /// # Errors
    ///
    /// [`TreeParseError`] with the byte position when `text` is not a tree.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_mining::ProcessTree;
    ///
    /// let tree = ProcessTree::parse("->( 'a', X( 'c', 'b' ), *( 'd', tau ) )")?;
    /// assert_eq!(tree.canonical().to_string(), "->( 'a', X( 'b', 'c' ), *( 'd', tau ) )");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parse(text: &str) -> Result<ProcessTree, TreeParseError> {
        let mut parser = TreeParser { text: text.as_bytes(), source: text, pos: 0 };
        let tree = parser.tree(true)?;
        if parser.pos != text.len() {
            return Err(TreeParseError { position: parser.pos, reason: "trailing text" });
        }
        Ok(tree)
    }

    /// PM4Py's `fold`: removes redundant silent steps, collapses one-child operators and
    /// flattens nested `->`, `X` and `+` of the same operator.
    #[must_use]
    pub fn fold(self) -> ProcessTree {
        let ProcessTree::Operator { operator, children } = self else { return self };
        let mut flat = Vec::with_capacity(children.len());
        for child in children {
            match child.fold() {
                ProcessTree::Operator { operator: inner, children: grandchildren }
                    if inner == operator && operator != Operator::Loop =>
                {
                    flat.extend(grandchildren);
                }
                child => flat.push(child),
            }
        }
        match operator {
            Operator::Sequence | Operator::Parallel => flat.retain(|child| *child != ProcessTree::Tau),
            Operator::Xor => {
                // Keep the last silent child only: one is enough to allow skipping.
                let n_tau = flat.iter().filter(|child| **child == ProcessTree::Tau).count();
                let mut to_drop = n_tau.saturating_sub(1);
                flat.retain(|child| {
                    if to_drop > 0 && *child == ProcessTree::Tau {
                        to_drop -= 1;
                        return false;
                    }
                    true
                });
            }
            Operator::Loop => {
                if flat.iter().all(|child| *child == ProcessTree::Tau) {
                    return ProcessTree::Tau;
                }
            }
        }
        match flat.len() {
            0 => ProcessTree::Tau,
            1 => flat.pop().unwrap_or(ProcessTree::Tau),
            _ => ProcessTree::Operator { operator, children: flat },
        }
    }

    /// The canonical form used for comparison: children of `X` and `+` sorted by their
    /// printed form, recursively. Two trees that differ only in the order of exclusive
    /// or parallel children have equal canonical forms.
    #[must_use]
    pub fn canonical(&self) -> ProcessTree {
        match self {
            ProcessTree::Operator { operator, children } => {
                let mut children: Vec<ProcessTree> = children.iter().map(ProcessTree::canonical).collect();
                if matches!(operator, Operator::Xor | Operator::Parallel) {
                    let mut keyed: Vec<(String, ProcessTree)> =
                        children.into_iter().map(|child| (child.to_string(), child)).collect();
                    keyed.sort_by(|a, b| a.0.cmp(&b.0));
                    children = keyed.into_iter().map(|(_, child)| child).collect();
                }
                ProcessTree::Operator { operator: *operator, children }
            }
            leaf => leaf.clone(),
        }
    }

    /// PM4Py's `tree_sort`: children of `X` and `+` ordered by the sum of the MD5 hashes
    /// of the labels below them, so that printed trees match PM4Py's text.
    pub fn pm4py_sort(&mut self) {
        self.pm4py_sort_inner();
    }

    fn pm4py_sort_inner(&mut self) -> HashSum {
        match self {
            ProcessTree::Tau => HashSum::default(),
            ProcessTree::Activity { label } => HashSum::of(label),
            ProcessTree::Operator { operator, children } => {
                let mut keyed: Vec<(HashSum, ProcessTree)> =
                    std::mem::take(children).into_iter().map(|mut child| (child.pm4py_sort_inner(), child)).collect();
                let total = keyed.iter().fold(HashSum::default(), |acc, (sum, _)| acc.add(*sum));
                if matches!(operator, Operator::Xor | Operator::Parallel) {
                    keyed.sort_by_key(|(sum, _)| *sum);
                }
                *children = keyed.into_iter().map(|(_, child)| child).collect();
                total
            }
        }
    }

    /// Every trace of the tree's language with at most `max_len` activities.
    ///
    /// Meant for checking small trees; the set grows exponentially with `max_len`.
    #[must_use]
    pub fn language(&self, max_len: usize) -> BTreeSet<Vec<String>> {
        match self {
            ProcessTree::Tau => BTreeSet::from([Vec::new()]),
            ProcessTree::Activity { label } if max_len > 0 => BTreeSet::from([vec![label.clone()]]),
            ProcessTree::Activity { .. } => BTreeSet::new(),
            ProcessTree::Operator { operator, children } => {
                let languages: Vec<BTreeSet<Vec<String>>> =
                    children.iter().map(|child| child.language(max_len)).collect();
                match operator {
                    Operator::Xor => languages.into_iter().flatten().collect(),
                    Operator::Sequence => {
                        languages.iter().fold(BTreeSet::from([Vec::new()]), |acc, next| concat(&acc, next, max_len))
                    }
                    Operator::Parallel => {
                        languages.iter().fold(BTreeSet::from([Vec::new()]), |acc, next| shuffle(&acc, next, max_len))
                    }
                    Operator::Loop => {
                        let empty = BTreeSet::new();
                        let body = languages.first().unwrap_or(&empty);
                        let redo: BTreeSet<Vec<String>> = languages.iter().skip(1).flatten().cloned().collect();
                        let redo_body = concat(&redo, body, max_len);
                        let mut result = body.clone();
                        let mut frontier = body.clone();
                        while !frontier.is_empty() {
                            let next: BTreeSet<Vec<String>> = concat(&frontier, &redo_body, max_len)
                                .into_iter()
                                .filter(|word| !result.contains(word))
                                .collect();
                            result.extend(next.iter().cloned());
                            frontier = next;
                        }
                        result
                    }
                }
            }
        }
    }

    /// The activity labels of the leaves, left to right.
    #[must_use]
    pub fn labels(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_labels(&mut out);
        out
    }

    fn collect_labels<'t>(&'t self, out: &mut Vec<&'t str>) {
        match self {
            ProcessTree::Tau => {}
            ProcessTree::Activity { label } => out.push(label),
            ProcessTree::Operator { children, .. } => {
                for child in children {
                    child.collect_labels(out);
                }
            }
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, quoted: bool) -> fmt::Result {
        match self {
            ProcessTree::Tau => f.write_str("tau"),
            ProcessTree::Activity { label } if quoted => write!(f, "'{label}'"),
            ProcessTree::Activity { label } => f.write_str(label),
            ProcessTree::Operator { operator, children } => {
                write!(f, "{}( ", operator.symbol())?;
                for (idx, child) in children.iter().enumerate() {
                    if idx > 0 {
                        f.write_str(", ")?;
                    }
                    child.write(f, true)?;
                }
                f.write_str(" )")
            }
        }
    }
}

impl fmt::Display for ProcessTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, false)
    }
}

fn concat(left: &BTreeSet<Vec<String>>, right: &BTreeSet<Vec<String>>, max_len: usize) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for a in left {
        for b in right {
            if a.len() + b.len() <= max_len {
                out.insert(a.iter().chain(b).cloned().collect());
            }
        }
    }
    out
}

fn shuffle(left: &BTreeSet<Vec<String>>, right: &BTreeSet<Vec<String>>, max_len: usize) -> BTreeSet<Vec<String>> {
    fn interleave(a: &[String], b: &[String], prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        if a.is_empty() || b.is_empty() {
            let mut word = prefix.clone();
            word.extend(a.iter().chain(b).cloned());
            out.insert(word);
            return;
        }
        prefix.push(a[0].clone());
        interleave(&a[1..], b, prefix, out);
        prefix.pop();
        prefix.push(b[0].clone());
        interleave(a, &b[1..], prefix, out);
        prefix.pop();
    }
    let mut out = BTreeSet::new();
    for a in left {
        for b in right {
            if a.len() + b.len() <= max_len {
                interleave(a, b, &mut Vec::new(), &mut out);
            }
        }
    }
    out
}

/// A 192-bit sum of 128-bit MD5 values, as Python's unbounded integers would hold it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct HashSum {
    high: u64,
    low: u128,
}

impl HashSum {
    fn of(label: &str) -> HashSum {
        HashSum { high: 0, low: u128::from_be_bytes(crate::md5::digest(label.as_bytes())) }
    }

    fn add(self, other: HashSum) -> HashSum {
        let (low, carry) = self.low.overflowing_add(other.low);
        HashSum { high: self.high + other.high + u64::from(carry), low }
    }
}

struct TreeParser<'t> {
    text: &'t [u8],
    source: &'t str,
    pos: usize,
}

impl TreeParser<'_> {
    fn error(&self, reason: &'static str) -> TreeParseError {
        TreeParseError { position: self.pos, reason }
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.text[self.pos..].starts_with(token.as_bytes()) {
            self.pos += token.len();
            return true;
        }
        false
    }

    fn tree(&mut self, root: bool) -> Result<ProcessTree, TreeParseError> {
        for (symbol, operator) in
            [("->( ", Operator::Sequence), ("X( ", Operator::Xor), ("+( ", Operator::Parallel), ("*( ", Operator::Loop)]
        {
            if self.eat(symbol) {
                let mut children = vec![self.tree(false)?];
                loop {
                    if self.eat(" )") {
                        return Ok(ProcessTree::Operator { operator, children });
                    }
                    if !self.eat(", ") {
                        return Err(self.error("expected `, ` or ` )`"));
                    }
                    children.push(self.tree(false)?);
                }
            }
        }
        if self.text[self.pos..].starts_with(b"tau") && matches!(self.text.get(self.pos + 3), None | Some(b',' | b' '))
        {
            self.pos += 3;
            return Ok(ProcessTree::Tau);
        }
        if root {
            let label = &self.source[self.pos..];
            self.pos = self.text.len();
            return Ok(ProcessTree::activity(label));
        }
        if !self.eat("'") {
            return Err(self.error("expected an operator, `tau` or a quoted label"));
        }
        // A label ends at the quote that is followed by a separator or the end.
        let start = self.pos;
        let mut end = start;
        loop {
            match self.text[end..].iter().position(|&b| b == b'\'') {
                None => return Err(self.error("unterminated label")),
                Some(offset) => {
                    end += offset;
                    let rest = &self.text[end + 1..];
                    if rest.is_empty() || rest.starts_with(b", ") || rest.starts_with(b" )") {
                        break;
                    }
                    end += 1;
                }
            }
        }
        let label = self.source[start..end].to_owned();
        self.pos = end + 1;
        Ok(ProcessTree::Activity { label })
    }
}

#[cfg(test)]
mod tests {
    use crate::ProcessTree;

    fn check_fold(input: &str, expect: &str) {
        assert_eq!(ProcessTree::parse(input).unwrap().fold().to_string(), expect);
    }

    #[test]
    fn printing_round_trips() {
        for text in ["->( 'a', X( 'b', 'c' ), *( 'd', tau ) )", "a", "tau", "X( tau, 'it''s' )"] {
            assert_eq!(ProcessTree::parse(text).unwrap().to_string(), text);
        }
        assert!(ProcessTree::parse("->( 'a'").is_err());
    }

    #[test]
    fn fold_removes_redundant_taus_and_flattens() {
        check_fold("->( 'a', ->( 'b', tau ), tau )", "->( 'a', 'b' )");
        check_fold("X( tau, X( tau, 'a' ) )", "X( tau, 'a' )");
        check_fold("*( tau, tau )", "tau");
        check_fold("*( 'a', tau )", "*( 'a', tau )");
        check_fold("+( X( tau ), 'a' )", "'a'".trim_matches('\''));
    }

    #[test]
    fn pm4py_sort_orders_by_label_hash_sums() {
        // md5("a") = 0cc175b9..., md5("b") = 92eb5ffe...: "a" sorts first.
        let mut tree = ProcessTree::parse("X( 'b', 'a' )").unwrap();
        tree.pm4py_sort();
        assert_eq!(tree.to_string(), "X( 'a', 'b' )");
    }
}
