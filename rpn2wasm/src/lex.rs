//! lex (front end, in progress).
