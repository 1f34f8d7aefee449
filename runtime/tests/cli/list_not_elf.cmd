// RUN: list list_not_elf.cmd
// RUN: list /nonexistent/binary
