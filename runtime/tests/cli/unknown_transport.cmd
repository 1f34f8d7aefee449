// RUN: run --transport bogus syntax_error.rpn -- /bin/true
