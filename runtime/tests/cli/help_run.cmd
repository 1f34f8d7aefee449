// RUN: run --help
