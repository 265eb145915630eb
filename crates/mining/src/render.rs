//! Drawing process trees as Graphviz DOT and Mermaid flowcharts.

use std::fmt::Write as _;

use crate::tree::ProcessTree;

/// The tree as a Graphviz `digraph`: operators as circles, activities as boxes, `tau` as
/// a small black dot.
#[must_use]
pub fn tree_to_dot(tree: &ProcessTree) -> String {
    let mut out = String::from("digraph process_tree {\n  node [fontname=\"Helvetica\"];\n");
    let mut next_id = 0;
    dot_node(tree, &mut out, &mut next_id);
    out.push_str("}\n");
    out
}

fn dot_node(tree: &ProcessTree, out: &mut String, next_id: &mut usize) -> usize {
    let id = *next_id;
    *next_id += 1;
    // Writing into a String cannot fail.
    let _ = match tree {
        ProcessTree::Tau => writeln!(out, "  n{id} [label=\"\", shape=point, width=0.15];"),
        ProcessTree::Activity { label } => writeln!(out, "  n{id} [label=\"{}\", shape=box];", dot_escape(label)),
        ProcessTree::Operator { operator, .. } => {
            writeln!(out, "  n{id} [label=\"{}\", shape=circle];", dot_escape(operator.symbol()))
        }
    };
    if let ProcessTree::Operator { children, .. } = tree {
        for child in children {
            let child_id = dot_node(child, out, next_id);
            let _ = writeln!(out, "  n{id} -> n{child_id};");
        }
    }
    id
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The tree as a Mermaid `flowchart TD`.
#[must_use]
pub fn tree_to_mermaid(tree: &ProcessTree) -> String {
    let mut out = String::from("flowchart TD\n");
    let mut next_id = 0;
    mermaid_node(tree, &mut out, &mut next_id);
    out
}

fn mermaid_node(tree: &ProcessTree, out: &mut String, next_id: &mut usize) -> usize {
    let id = *next_id;
    *next_id += 1;
    let _ = match tree {
        ProcessTree::Tau => writeln!(out, "  n{id}((tau))"),
        ProcessTree::Activity { label } => writeln!(out, "  n{id}[\"{}\"]", mermaid_escape(label)),
        ProcessTree::Operator { operator, .. } => writeln!(out, "  n{id}((\"{}\"))", mermaid_escape(operator.symbol())),
    };
    if let ProcessTree::Operator { children, .. } = tree {
        for child in children {
            let child_id = mermaid_node(child, out, next_id);
            let _ = writeln!(out, "  n{id} --> n{child_id}");
        }
    }
    id
}

fn mermaid_escape(text: &str) -> String {
    text.replace('"', "#quot;")
}

#[cfg(test)]
mod tests {
    use crate::{ProcessTree, tree_to_dot, tree_to_mermaid};

    #[test]
    fn renders_every_node_and_edge() {
        let tree = ProcessTree::parse("->( 'a \"x\"', X( 'b', tau ) )").unwrap();
        let dot = tree_to_dot(&tree);
        assert_eq!(dot.matches(" -> ").count(), 4);
        assert!(dot.contains(r#"label="a \"x\"""#));
        let mermaid = tree_to_mermaid(&tree);
        assert_eq!(mermaid.matches(" --> ").count(), 4);
        assert!(mermaid.contains("a #quot;x#quot;"));
    }
}
