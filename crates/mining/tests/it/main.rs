//! Integration tests of flowmem-mining, one module per topic.

mod conformance_parity;
mod dataflow;
mod parity;
mod properties;
mod skeleton;
