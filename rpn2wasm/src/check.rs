//! check (front end, in progress).
