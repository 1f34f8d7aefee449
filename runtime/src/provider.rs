//! Probe providers: the layers that arm probes in traced processes and deliver hits.

pub mod ptrace;
