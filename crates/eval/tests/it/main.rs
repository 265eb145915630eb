//! Integration tests of flowmem-eval, one module per topic.

mod evaluate;
mod report_html;
mod util;
