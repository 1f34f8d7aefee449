// RUN: run syntax_error.rpn
// RUN: run
// RUN: run syntax_error.rpn -- /bin/true
// RUN: run bt_parse_error.bt -- /bin/true
