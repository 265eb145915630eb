//! Integration tests of flowmem-mining, one module per topic.

mod parity;
mod properties;
mod skeleton;
