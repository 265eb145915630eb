//! Integration tests of flowmem-mining, one module per topic.

mod dataflow;
mod parity;
mod properties;
mod skeleton;
