//! Integration tests of flowmem-eval, one module per topic.

mod report_html;
mod util;
