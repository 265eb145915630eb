//! Integration tests of flowmem-eval, one module per topic.

mod evaluate;
mod judge;
mod report_html;
mod systems;
mod task_check;
mod util;
