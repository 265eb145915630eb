//! Integration tests of flowmem-eval, one module per topic.
