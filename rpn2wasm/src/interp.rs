//! interp (in progress).
