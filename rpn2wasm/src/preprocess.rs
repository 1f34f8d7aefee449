//! preprocess (front end, in progress).
