// RUN: bench --help
