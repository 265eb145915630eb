//! Integration tests of flowmem-eval, one module per topic.

mod evaluate;
mod report_html;
mod task_check;
mod util;
