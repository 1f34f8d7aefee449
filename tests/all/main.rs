//! The integration test binary: one file per behaviour.

mod examples;
