// RUN: --help
