//! The integration test binary: one file per behaviour.

mod differential;
mod edge_operands;
mod examples;
mod inproc_differential;
mod real_examples;
mod resolution;
mod return_probes;
