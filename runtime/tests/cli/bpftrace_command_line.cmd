// bpftrace's command line in `wprobe run`: options wprobe refuses, bad
// values (bpftrace's words) and unknown options, each at its place in the
// command line with a caret; a program file that cannot be read; `--version`.
// RUN: run -k -e BEGIN{exit();}
// RUN: run --info
// RUN: run -p a1111 x.bt
// RUN: run --pid=5000000 x.bt
// RUN: run -f jsonx -e BEGIN{exit();}
// RUN: run -idonotexist
// RUN: run missing_file.bt
// RUN: run --version
